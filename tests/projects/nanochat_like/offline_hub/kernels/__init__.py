"""Stands in for the `kernels` package (Hugging Face kernels hub) on an offline machine: any hub access fails
loudly, so a test sees whether the shim answered a call locally."""


class HubAccess(RuntimeError):
    pass


def get_kernel(repo_id, *, revision=None, version=None, backend=None, user_agent=None, trust_remote_code=False,
               check_arch=True):
    raise HubAccess(f"kernels hub download attempted: {repo_id}")


def has_kernel(repo_id, *, revision=None, version=None, backend=None, trust_remote_code=False, check_arch=True):
    raise HubAccess(f"kernels hub query attempted: {repo_id}")
