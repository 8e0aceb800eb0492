#!/usr/bin/env python3
"""Seed corpora for the libFuzzer harnesses (packaging/fuzz.sh runs this), from real files:
the torch.save fixtures of tests/fixtures (and their data.pkl), small safetensors files written
here in the layouts the project reads (plain, metadata, int8 weights, teacher-forward input),
the shipped training configs and accelerator configs. Standard library only.

    python3 fuzz/make_seeds.py OUT_DIR      # writes OUT_DIR/<harness>/<seed>
"""
import json
import pathlib
import struct
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def safetensors(tensors, metadata=None):
    """tensors: {name: (dtype, shape, raw bytes)} -> the file's bytes."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def i64(*values):
    return struct.pack("<%dq" % len(values), *values)


def f32(*values):
    return struct.pack("<%df" % len(values), *values)


def npy(descr, shape, raw, fortran=False):
    """A version 1.0 .npy file as numpy writes it (header padded to 64 bytes)."""
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, fortran, dims)
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + raw


def npz(arrays):
    """np.savez's layout: stored '<name>.npy' members."""
    import io
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in arrays.items():
            z.writestr(name + ".npy", data)
    return buf.getvalue()


def main(out):
    out = pathlib.Path(out)
    seeds = {h: {} for h in ["fuzz_json", "fuzz_pickle", "fuzz_pth", "fuzz_safetensors",
                             "fuzz_teacher_input", "fuzz_accel_json", "fuzz_config_json", "fuzz_npz"]}
    for pth in sorted((ROOT / "tests/fixtures").glob("*.pth")):
        seeds["fuzz_pth"][pth.name] = pth.read_bytes()
        with zipfile.ZipFile(pth) as z:
            for name in z.namelist():
                if name.endswith("data.pkl"):
                    seeds["fuzz_pickle"][pth.stem + ".pkl"] = z.read(name)
    st = seeds["fuzz_safetensors"]
    st["mar_micro_expected.safetensors"] = (ROOT / "tests/fixtures/mar_micro_expected.safetensors").read_bytes()
    st["plain.safetensors"] = safetensors({"w": ("F32", [2, 2], f32(1, 2, 3, 4)), "b": ("F16", [2], b"\x00\x3c\x00\x40")})
    st["meta.safetensors"] = safetensors({"w": ("F32", [1], f32(1))},
                                         {"varscope.sampling": '{"cfg": 3, "top_k": 50}',
                                          "varscope.config": '{"embed_dim": 8}'})
    st["int8.safetensors"] = safetensors(
        {"w": ("I8", [2, 2], bytes([1, 2, 0x81, 127])), "w.qscale": ("F32", [2], f32(0.5, 0.25))},
        {"varscope.quant": json.dumps({"scheme": "int8-rowwise-symmetric", "scale_suffix": ".qscale",
                                       "dtype": "float32", "tensors": ["w"]})})
    st["empty.safetensors"] = safetensors({})
    teacher = safetensors({"labels": ("I64", [1], i64(3)), "tokens.0": ("I64", [1, 1], i64(5)),
                           "tokens.1": ("I64", [1, 4], i64(1, 2, 3, 15))})
    seeds["fuzz_teacher_input"]["teacher.safetensors"] = teacher
    seeds["fuzz_teacher_input"]["state_dict.pth"] = (ROOT / "tests/fixtures/state_dict.pth").read_bytes()
    st["teacher.safetensors"] = teacher

    accel = {
        "fastvar": {"fastvar": {"enabled": True, "ratios": [0.4, 0.5]}},
        "sparvar_skip": {"sparvar": {"enabled": True, "sparse_scales": 3}, "skip": {"enabled": True, "last_n": 2}},
        "fastvar_ams_kv": {"fastvar": {"enabled": True}, "ams_kv": {"enabled": True}},
        "lazyvar": {"lazyvar": {"enabled": True}},
        "lazymar": {"lazymar": {"enabled": True, "keep_ratio": 0.3}},
        "baseline": {},
    }
    for name, j in accel.items():
        seeds["fuzz_accel_json"][name + ".json"] = json.dumps(j).encode()
    for cfg in sorted((ROOT / "resources/training").glob("*.json")):
        text = cfg.read_bytes()
        seeds["fuzz_config_json"][cfg.name] = text
        for section, value in json.loads(text).items():
            if isinstance(value, dict):
                seeds["fuzz_config_json"][cfg.stem + "." + section + ".json"] = json.dumps(value).encode()
    seeds["fuzz_npz"]["stats.npz"] = npz({"mu": npy("<f8", (2,), struct.pack("<2d", 0.5, 1)),
                                          "sigma": npy("<f8", (2, 2), struct.pack("<4d", 1, 0, 0, 1))})
    seeds["fuzz_npz"]["fortran.npy"] = npy("<f4", (2, 3), f32(0, 3, 1, 4, 2, 5), fortran=True)
    seeds["fuzz_npz"]["bytes.npy"] = npy("|u1", (4,), bytes(range(4)))
    seeds["fuzz_config_json"]["sampling.json"] = b'{"cfg": 3, "top_k": 600, "top_p": 0.9}'
    for h in ("fuzz_accel_json", "fuzz_config_json"):
        seeds["fuzz_json"].update({h + "." + k: v for k, v in seeds[h].items()})

    # fuzz_t5: role byte (0 spiece.model, 1 config.json, 2 shard index, 3 prompt vocabulary,
    # 4 a prompt for a fixed vocabulary's filter) + content.
    t5 = ROOT / "tests/fixtures/t5_tiny"
    seeds["fuzz_t5"] = {
        "spiece.model": b"\x00" + (t5 / "spiece.model").read_bytes(),
        "not_t5.model": b"\x00" + (t5 / "not_t5.model").read_bytes(),
        "config.json": b"\x01" + (t5 / "model/config.json").read_bytes(),
        "config_relu.json": b"\x01" + (t5 / "model_relu/config.json").read_bytes(),
        "index.json": b"\x02" + (t5 / "model_sharded/model.safetensors.index.json").read_bytes(),
        "prompt_vocabulary.json":
            b'\x03{"format": "varscope-prompt-vocabulary", "version": 1, "words": ["a", "moon", "&"]}',
        "prompt.txt": b"\x04an icon showing thumbs up, from the a & b category",
    }
    for harness, files in seeds.items():
        d = out / harness
        d.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (d / name).write_bytes(data)
        print(f"{harness}: {len(files)} seeds")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build-fuzz/seeds")
