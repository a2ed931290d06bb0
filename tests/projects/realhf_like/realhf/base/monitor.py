"""base/monitor.py: pynvml imported at module level; a utilization monitor."""
import pynvml


def gpu_stats(idx=0):
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(idx)
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    util = pynvml.nvmlDeviceGetUtilizationRates(handle)
    pynvml.nvmlShutdown()
    try:
        pynvml.nvmlShutdown()
        double_shutdown = "no error"
    except pynvml.nvml.NVMLError_Uninitialized:
        double_shutdown = "NVMLError_Uninitialized"
    return {"total": mem.total, "used": mem.used, "util": util.gpu, "double_shutdown": double_shutdown}
