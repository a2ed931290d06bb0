"""When a patch can be removed: a condition a program can check, followed by the reason in words.

Every patch declares ``remove_when`` as one line, ``<condition>: <reason>``, the condition being one of:

* a requirement on an upstream distribution, ``<name><specifier>`` without spaces (``torch_npu>=2.6``,
  ``megatron-core>=0.17``): where the installed distribution satisfies it the patch is not needed, and it can be
  deleted once every version the shim supports does;
* a link, ``https://<host>/<path>``: where upstream tracks the missing feature or where it would land (used where
  no upstream version has it yet). :attr:`Removal.link` says which kind of page it is: an ``issue`` or a ``pull``
  request (``https://github.com/<owner>/<repo>/issues/<n>``, ``.../pull/<n>``), a ``file`` (or folder) at a
  pinned commit (``https://github.com/<owner>/<repo>/blob/<40-hex sha>/<path>``, ``.../tree/<sha>/<path>``), or
  another ``page`` (a Hugging Face repository, a project's home). A GitHub file on a branch (``/blob/main/...``,
  ``/tree/master/...``) is rejected: the branch moves, so the link rots; link the issue or pull request that tracks
  the feature, or the file at the commit it was read at;
* ``never``: a permanent translation (CUDA names on an NPU always need translating).

The reason says what upstream lacks or added. :func:`parse_removal` is applied to every declaration when it is
registered (a malformed condition, a branch link included, is a declaration error); :func:`evaluate` judges a
version condition against the installed packages, for ``list``, which names the kind of a link's page.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable

#: the kinds of condition, in the order ``list`` and the documentation name them
KINDS = ("version", "link", "never")
#: the kinds of link, and what ``list`` calls each
LINKS = {"issue": "issue", "pull": "pull request", "file": "file at a pinned commit", "page": "page"}

GRAMMAR = ("'<condition>: <reason>', the condition being a requirement on an upstream distribution "
           "('torch_npu>=2.6'), a link to where upstream tracks the change ('https://github.com/...') or 'never' "
           "(a permanent translation)")

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_VERSION = r"\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?"
_CLAUSE = rf"(?:(?:==|!=){_VERSION}(?:\.\*)?|(?:~=|<=|>=|<|>){_VERSION})"
_REQUIREMENT = re.compile(rf"({_NAME})({_CLAUSE}(?:,{_CLAUSE})*)")
_LINK = re.compile(r"https://[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+/\S+")
#: a GitHub page of a repository: what follows ``https://github.com/<owner>/<repo>/``
_GITHUB = re.compile(r"https://github\.com/[^/\s]+/[^/\s]+/(\S*)")
_NUMBERED = re.compile(r"(issues|pull)/\d+(?:[/#?]\S*)?")
_AT_REF = re.compile(r"(?:blob|tree)/([^/\s]+)(?:/\S*)?")
_SHA = re.compile(r"[0-9a-f]{40}")


@dataclasses.dataclass(frozen=True)
class Removal:
    """A parsed ``remove_when``: its kind, the condition as written, and the reason."""

    kind: str
    condition: str
    reason: str
    #: for a version condition: the distribution and the specifier it must satisfy
    distribution: str = ""
    specifier: str = ""
    #: for a link: what it points at, one of :data:`LINKS` (``issue``, ``pull``, ``file``, ``page``)
    link: str = ""

    def as_dict(self) -> dict[str, str]:
        out = {"kind": self.kind, "condition": self.condition, "reason": self.reason}
        if self.kind == "version":
            out.update(distribution=self.distribution, specifier=self.specifier)
        elif self.kind == "link":
            out.update(url=self.condition, link=self.link)
        return out


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a condition says in this environment, and a sentence: ``removable`` (a version condition the installed
    package satisfies), ``holds`` (a version not reached, or the package absent), ``tracked`` (a link: checked
    upstream, not here) or ``permanent``."""

    state: str
    detail: str


@functools.cache
def parse_removal(text: str) -> Removal:
    """The condition and reason of ``text``; ``ValueError`` naming the grammar when it has neither form."""
    if not isinstance(text, str) or "\n" in text:
        raise ValueError(f"remove_when must be one line reading {GRAMMAR}; got {text!r}")
    condition, sep, reason = text.partition(": ")
    condition, reason = condition.strip(), reason.strip()
    if not sep or not reason:
        raise ValueError(f"remove_when must read {GRAMMAR}; got {text!r} (no reason after ': ')")
    if condition == "never":
        return Removal("never", condition, reason)
    if condition.startswith("https://"):
        if not _LINK.fullmatch(condition):
            raise ValueError(f"remove_when link {condition!r} is not https://<host>/<path> (a link to the issue, "
                             "pull request or file upstream)")
        return Removal("link", condition, reason, link=link_kind(condition))
    match = _REQUIREMENT.fullmatch(condition)
    if match is None:
        raise ValueError(f"remove_when condition {condition!r} is not a requirement like 'torch_npu>=2.6' "
                         f"(no spaces), a link or 'never'; remove_when must read {GRAMMAR}")
    return Removal("version", condition, reason, distribution=match.group(1), specifier=match.group(2))


def link_kind(url: str) -> str:
    """What a link points at: ``issue``, ``pull``, ``file`` (a GitHub file or folder at a 40-hex commit) or
    ``page``; ``ValueError`` for a GitHub file or folder on a branch or tag, whose content moves."""
    github = _GITHUB.fullmatch(url)
    if github is None:
        return "page"
    rest = github.group(1)
    numbered = _NUMBERED.fullmatch(rest)
    if numbered:
        return "issue" if numbered.group(1) == "issues" else "pull"
    at_ref = _AT_REF.fullmatch(rest)
    if at_ref is None:
        return "page"
    if not _SHA.fullmatch(at_ref.group(1)):
        raise ValueError(f"remove_when link {url!r} names a file on {at_ref.group(1)!r}, a branch (or tag) whose "
                         "content moves: link an issue, a pull request or the file at a commit "
                         "(https://github.com/<owner>/<repo>/blob/<40-hex sha>/<path>)")
    return "file"


def evaluate(removal: Removal, installed: Callable[[str], str | None] | None = None) -> Verdict:
    """Judge ``removal`` here: a version condition against the installed distribution (``installed(name)`` gives
    its version, or None when it is absent)."""
    if removal.kind == "never":
        return Verdict("permanent", "permanent")
    if removal.kind == "link":
        return Verdict("tracked", f"tracked upstream ({LINKS[removal.link]})")
    from .versions import installed_version, satisfies

    version = (installed or installed_version)(removal.distribution)
    if version is None:
        return Verdict("holds", f"holds until {removal.condition} ({removal.distribution} is not installed here)")
    if satisfies(version, removal.specifier):
        return Verdict("removable", f"removable here: {removal.distribution} {version} satisfies "
                                    f"{removal.specifier}")
    return Verdict("holds", f"holds until {removal.condition} (installed: {removal.distribution} {version})")
