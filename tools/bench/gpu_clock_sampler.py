"""The GPU's SM clock and power while a contestant runs back to back (issue #6's side-by-side).

On the H100 here the CSLA kernel reaches the card's power limit: its SM clock falls from ~1.65
to ~1.35 GHz inside one 0.15 ms launch (bench/results/2026-11-26-h100/csla_s19.md). A ratio of
times then mixes two things, the cycles each kernel needs and the clock each one gets, so the
side-by-side script can report the clock every contestant holds.

NVML is reached through ctypes (libnvidia-ml.so.1 comes with the driver; no Python package).
"""
import ctypes
import statistics
import threading
import time

NVML_CLOCK_SM = 1


class NvmlUnavailable(RuntimeError):
    pass


class GpuSampler:
    """Samples one GPU's SM clock (MHz) and power (W, the driver's reading) every `period_s`
    seconds on a thread of its own, between start() and stop()."""

    def __init__(self, pci_bus_id=None, index=0, period_s=0.005):
        try:
            self._nvml = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            raise NvmlUnavailable(f"libnvidia-ml.so.1 not found: {e}") from e
        if self._nvml.nvmlInit_v2() != 0:
            raise NvmlUnavailable("nvmlInit_v2 failed")
        self._handle = ctypes.c_void_p()
        err = 1
        if pci_bus_id:
            err = self._nvml.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(),
                                                              ctypes.byref(self._handle))
        if err != 0:
            err = self._nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index),
                                                           ctypes.byref(self._handle))
        if err != 0:
            raise NvmlUnavailable(f"no NVML handle for GPU {pci_bus_id or index} (error {err})")
        self._period = period_s
        self._samples = []
        self._stop = threading.Event()
        self._thread = None

    def read(self):
        clock, power = ctypes.c_uint(), ctypes.c_uint()
        if self._nvml.nvmlDeviceGetClockInfo(self._handle, NVML_CLOCK_SM, ctypes.byref(clock)):
            return None
        if self._nvml.nvmlDeviceGetPowerUsage(self._handle, ctypes.byref(power)):
            return None
        return time.monotonic(), float(clock.value), power.value / 1000.0

    def power_limit_w(self):
        limit = ctypes.c_uint()
        if self._nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle, ctypes.byref(limit)):
            return None
        return limit.value / 1000.0

    def _run(self):
        while not self._stop.is_set():
            s = self.read()
            if s is not None:
                self._samples.append(s)
            time.sleep(self._period)

    def start(self):
        self._samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join()
        return list(self._samples)


def summarize(samples, t_from, t_to):
    """Median SM clock (MHz), median power (W) and the sample count in [t_from, t_to]."""
    window = [s for s in samples if t_from <= s[0] <= t_to]
    if not window:
        return None
    return {"sm_clock_mhz": statistics.median(s[1] for s in window),
            "sm_clock_mhz_min": min(s[1] for s in window),
            "power_w": statistics.median(s[2] for s in window), "samples": len(window)}


def hold(fn, flush, seconds, sampler, settle=0.4):
    """Runs flush-then-fn back to back (as the side-by-side times them) for about `seconds`,
    then waits for the GPU; returns the clock and power summary of the samples after
    the first `settle` share of the hold (the power controller's settling)."""
    import torch  # the caller's; imported here so that the module loads without a GPU

    # At most 32 calls queued (each waits for the call 32 before it), as the CLI's hold_on_gpu:
    # the GPU never idles and the hold ends near `seconds`, not after a long queue drains.
    done = [torch.cuda.Event() for _ in range(32)]
    torch.cuda.synchronize()
    sampler.start()
    t0 = time.monotonic()
    n = 0
    try:
        while time.monotonic() - t0 < seconds:
            if n >= len(done):
                done[n % len(done)].synchronize()
            flush.fill_(n & 0xFF)
            fn()
            done[n % len(done)].record()
            n += 1
        torch.cuda.synchronize()
    except BaseException:
        sampler.stop()
        raise
    t1 = time.monotonic()
    samples = sampler.stop()
    out = summarize(samples, t0 + settle * (t1 - t0), t1)
    if out is not None:
        out["calls"] = n
        out["seconds"] = t1 - t0
    return out
