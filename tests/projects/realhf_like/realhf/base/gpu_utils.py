# realhf/base/gpu_utils.py @ inclusionAI/AReaL c5711f06a7a8 (Apache-2.0): the GPU count, as realhf writes it.
import itertools
import os
import platform


def gpu_count():
    """Returns the number of gpus on a node.

    Ad-hoc to frl cluster.
    """
    if platform.system() == "Darwin":
        return 0
    elif platform.system() == "Windows":
        try:
            import torch

            return torch.cuda.device_count()
        except ImportError:
            return 0
    else:
        dev_directories = list(os.listdir("/dev/"))
        for cnt in itertools.count():
            if "nvidia" + str(cnt) in dev_directories:
                continue
            else:
                break
        return cnt
