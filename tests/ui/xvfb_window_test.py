"""Drives the real VARScope window under Xvfb with xdotool (issue #37); Python 3 stdlib only.

Run through tests/ui/xvfb_window_test.sh (it starts xvfb-run and skips cleanly without the
tools). Steps, each checked:
  1. start `varscope --model t2i` in a fresh home (first start), wait for the first image (the
     run history's index gets its first entry), check the window is 1600x1000 and the image
     area of a screenshot is not blank;
  2. Ctrl+L, type a prompt, Enter: one run of that prompt (a second history entry);
  3. Ctrl+E: export the figure to a typed path (the dialog opens on the file name);
  4. scroll the wheel over the settings column without clicking it first, then export again:
     the settings chunks of both PNGs are equal and no run started; then click the seed box and
     scroll once: the seed (only) changes, so the wheel did reach the settings;
  5. Ctrl+R (a new seed, a run) then Esc: both canvases show the same image (no accelerator is
     on; no preview of the cancelled run stays on show); Ctrl+Q: the app quits (exit 0).
Screenshots (xwd, converted to PNG here) go to SHOTS_DIR.
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

TIMEOUT_S = 240  # the first image on a 2-core CI machine (model load + T5 + two runs)
SEED_BOX_Y = 185  # the seed box's centre below the window's top at the first start


def log(msg):
    print(f"[xvfb-test {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fail(msg):
    log("FAIL: " + msg)
    sys.exit(1)


def xdotool(*args, check=True):
    r = subprocess.run(["xdotool", *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        fail(f"xdotool {' '.join(map(str, args))}: {r.stderr.strip()}")
    return r.stdout.strip()


def wait_for(what, predicate, timeout=TIMEOUT_S, proc=None):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            fail(f"the app exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.2)
    fail(f"timed out after {timeout} s waiting for {what}")


# --- images ------------------------------------------------------------------------------------
def read_xwd(path):
    """(width, height, rows of RGB bytes) of a ZPixmap XWD dump (xwd -root)."""
    data = open(path, "rb").read()
    h = struct.unpack(">25I", data[:100])
    header_size, fmt, width, height = h[0], h[2], h[4], h[5]
    byte_order, bpp, bpl = h[7], h[11], h[12]
    masks = h[14:17]
    ncolors = h[19]
    if fmt != 2 or bpp != 32 or byte_order != 0 or masks != (0xFF0000, 0xFF00, 0xFF):
        fail(f"{path}: expected a 32-bit LSB-first BGRX dump, got format {fmt}, {bpp} bits, "
             f"byte order {byte_order}, masks {[hex(m) for m in masks]}")
    offset = header_size + 12 * ncolors
    rows = []
    for y in range(height):
        line = data[offset + y * bpl: offset + y * bpl + width * 4]
        rgb = bytearray(width * 3)
        rgb[0::3], rgb[1::3], rgb[2::3] = line[2::4], line[1::4], line[0::4]
        rows.append(bytes(rgb))
    return width, height, rows


def write_png(path, width, height, rows):
    raw = b"".join(b"\0" + row for row in rows)

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 6)))
        f.write(chunk(b"IEND", b""))


def png_text(path):
    """The text chunks (tEXt, zTXt, iTXt) of a PNG as a dict."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    pos, out = 8, {}
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"tEXt":
            k, v = body.split(b"\0", 1)
            out[k.decode("latin-1")] = v.decode("latin-1")
        elif kind == b"zTXt":
            k, v = body.split(b"\0", 1)
            out[k.decode("latin-1")] = zlib.decompress(v[1:]).decode("latin-1")
        elif kind == b"iTXt":
            k, rest = body.split(b"\0", 1)
            compressed, rest = rest[0], rest[2:]
            _lang, rest = rest.split(b"\0", 1)
            _translated, text = rest.split(b"\0", 1)
            out[k.decode("latin-1")] = (zlib.decompress(text) if compressed else text).decode()
    return out


def screenshot(shots, name):
    xwd = os.path.join(shots, name + ".xwd")
    r = subprocess.run(["xwd", "-root", "-silent", "-out", xwd], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"xwd: {r.stderr.strip()}")
    width, height, rows = read_xwd(xwd)
    png = os.path.join(shots, name + ".png")
    write_png(png, width, height, rows)
    os.remove(xwd)
    log(f"screenshot {png} ({width}x{height})")
    return width, height, rows


def distinct_colours(rows, x0, y0, x1, y1):
    return len({rows[y][3 * x:3 * x + 3] for y in range(y0, y1, 2) for x in range(x0, x1, 2)})


# --- the app -----------------------------------------------------------------------------------
def history_entries(home):
    for index in glob.glob(os.path.join(home, "data", "**", "history", "index.json"),
                           recursive=True):
        try:
            with open(index) as f:
                return json.load(f)["entries"]
        except (OSError, ValueError, KeyError):
            return []  # written atomically, but it may be absent for a moment
    return []


def export_figure(home, wid, path, proc):
    xdotool("windowfocus", "--sync", wid)
    xdotool("key", "--clearmodifiers", "ctrl+e")
    dialog = wait_for("the export dialog",
                      lambda: xdotool("search", "--onlyvisible", "--name",
                                      "^Export comparison figure$", check=False),
                      timeout=30, proc=proc).split()[0]
    xdotool("windowfocus", "--sync", dialog)
    # The dialog opens on the file name, selected: typing replaces it; Enter saves.
    xdotool("type", "--delay", "20", path)
    xdotool("key", "Return")
    wait_for(f"the export {path}", lambda: os.path.exists(path), timeout=60, proc=proc)
    settings = png_text(path).get("varscope.settings")
    if not settings:
        fail(f"{path} carries no varscope.settings chunk")
    log(f"exported {path} ({os.path.getsize(path)} bytes)")
    return json.loads(settings)


def changed_keys(a, b):
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def main():
    app, shots = sys.argv[1], os.path.abspath(sys.argv[2])
    os.makedirs(shots, exist_ok=True)
    home = tempfile.mkdtemp(prefix="varscope-xvfb-home-")
    env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=os.path.join(home, "config"),
               XDG_DATA_HOME=os.path.join(home, "data"),
               XDG_CACHE_HOME=os.path.join(home, "cache"), QT_QPA_PLATFORM="xcb")
    env.pop("WAYLAND_DISPLAY", None)
    app_log = open(os.path.join(shots, "app.log"), "w")
    started = time.time()
    proc = subprocess.Popen([app, "--model", "t2i", "--device", "cpu", "--seed", "3",
                             "--size", "1600x1000"], env=env, stdout=app_log, stderr=app_log)
    try:
        run(proc, home, shots, started)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        app_log.close()
        shutil.rmtree(home, ignore_errors=True)  # settings, history and exports of this run


def run(proc, home, shots, started):
    # 1. The window and its first image.
    wid = wait_for("the window", lambda: xdotool("search", "--onlyvisible", "--name",
                                                 "^VARScope", check=False), proc=proc).split()[0]
    wait_for("the first image", lambda: len(history_entries(home)) >= 1, proc=proc)
    log(f"first image after {time.time() - started:.1f} s")
    time.sleep(0.5)  # the panels repaint after the history entry is written
    geometry = dict(line.split("=") for line in
                    xdotool("getwindowgeometry", "--shell", wid).splitlines())
    if (int(geometry["WIDTH"]), int(geometry["HEIGHT"])) != (1600, 1000):
        fail(f"window is {geometry['WIDTH']}x{geometry['HEIGHT']}, asked for 1600x1000")
    wx, wy = int(geometry["X"]), int(geometry["Y"])
    _, _, rows = screenshot(shots, "1-first-image")
    # The comparison view sits between the settings column (left, ~370 px) and the inspector
    # (right, ~620 px), under the menu and tool bars: an emoji there has many colours, an empty
    # canvas (its text on a flat background) few.
    colours = distinct_colours(rows, wx + 420, wy + 120, wx + 940, wy + 560)
    log(f"image area: {colours} distinct colours")
    if colours < 64:
        fail(f"the image area looks blank ({colours} colours)")

    # 2. A prompt typed into the prompt box (Ctrl+L goes there) and Enter: one run.
    xdotool("windowfocus", "--sync", wid)
    xdotool("key", "--clearmodifiers", "ctrl+l")
    xdotool("type", "--delay", "40", "thumbs up")
    xdotool("key", "Return")
    wait_for("the prompt's run", lambda: len(history_entries(home)) >= 2, proc=proc)
    time.sleep(1.5)  # no second run may follow (the typing pause must not start one)
    entries = history_entries(home)
    if len(entries) != 2:
        fail(f"{len(entries)} runs after typing a prompt + Enter, expected 2 (one per Enter)")
    screenshot(shots, "2-prompt")

    # 3. Ctrl+E to a typed path.
    out = os.path.join(home, "exports")
    os.makedirs(out)
    before = export_figure(home, wid, os.path.join(out, "before.png"), proc)
    if before.get("prompt") != "thumbs up":
        fail(f"the export's settings do not carry the typed prompt: {before}")

    # 4. The wheel over the settings column (model, device, seed, CFG, top-k, top-p, presets: a
    #    30-px grid over the left dock), nothing clicked: no setting changes.
    xdotool("windowfocus", "--sync", wid)
    moves = []
    for y in range(wy + 90, wy + 660, 30):
        for x in (wx + 60, wx + 170, wx + 290):
            moves += ["mousemove", x, y, "click", "--repeat", "2", "5"]
    xdotool(*moves)
    time.sleep(2.0)  # a changed setting would start a run after 300 ms
    screenshot(shots, "3-after-wheel")
    after = export_figure(home, wid, os.path.join(out, "after.png"), proc)
    if after != before:
        fail(f"the wheel changed settings it only passed over: {changed_keys(before, after)}")
    if len(history_entries(home)) != 2:
        fail("the wheel started a run")
    log("the wheel over the settings column changed nothing")
    # The control: the same wheel over the seed box after a click on it (focus) changes the seed
    # by one, so the grid above did pass over the settings. (Layout of the first start at
    # 1600x1000: the seed box is the fourth row of the model panel.)
    xdotool("mousemove", wx + 170, wy + SEED_BOX_Y, "click", "1", "click", "4")
    wait_for("the run of the new seed", lambda: len(history_entries(home)) >= 3, proc=proc)
    control = export_figure(home, wid, os.path.join(out, "control.png"), proc)
    if changed_keys(before, control) != ["seed"] or control["seed"] != before["seed"] + 1:
        fail(f"the wheel over the focused seed box: {changed_keys(before, control)}, seed "
             f"{before['seed']} -> {control['seed']} (expected +1 and nothing else)")
    log(f"control: the wheel over the focused seed box set seed {control['seed']}")

    # 5. Ctrl+R starts a run with a new seed; Esc cancels it (or it had finished); Ctrl+Q quits.
    xdotool("windowfocus", "--sync", wid)
    xdotool("key", "--clearmodifiers", "ctrl+r")
    time.sleep(0.6)
    xdotool("key", "Escape")
    time.sleep(1.0)
    n = len(history_entries(home))
    log("Esc: the run was cancelled (not kept)" if n == 3 else
        "Esc: the run had finished before Esc (kept)")
    if proc.poll() is not None:
        fail(f"the app exited ({proc.returncode}) after Esc")
    _, _, rows = screenshot(shots, "4-after-esc")
    # No accelerator is on, so both canvases show the same image whether Esc caught the run or
    # not: the baseline canvas must not keep a preview of the cancelled run. The canvases share
    # the centre's width; their exact offset is found by search.
    band = [rows[y][3 * (wx + 420):3 * (wx + 620)] for y in range(wy + 160, wy + 420, 10)]
    same = any(all(rows[y][3 * (wx + 420 + dx):3 * (wx + 620 + dx)] == b
                   for y, b in zip(range(wy + 160, wy + 420, 10), band))
               for dx in range(240, 340))
    if not same:
        fail("after Esc the baseline and accelerated canvases differ (a cancelled run's preview "
             "left on show?)")
    log("after Esc both canvases show the results on show")
    xdotool("windowfocus", "--sync", wid)
    xdotool("key", "--clearmodifiers", "ctrl+q")
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        fail("the app did not quit on Ctrl+Q")
    if code != 0:
        fail(f"the app exited with {code}")
    log(f"PASS ({time.time() - started:.1f} s)")


if __name__ == "__main__":
    main()
