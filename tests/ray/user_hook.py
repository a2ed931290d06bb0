"""A user's own Ray worker setup hook, given as a module path."""
import os


def mark():
    os.environ["USER_HOOK_RAN"] = "1"
