"""What makes two crash states one (pure; host and guest): the image a state replays and the keys
it tells the checker.

Two states of one log are one *distinct* state when they replay the same data -- the same fully
durable data entries and the same torn writes with the same sectors -- tell the same lie (a lying
disk's misplaced, flipped or bad sector: core/crashmodels/lies.py) and tell the checker the same acked and
begun keys.  Replay applies the durable entries in log order, so such states give byte-identical
images (``replay.reference_image`` and ``replay.materialize`` alike) and identical checker input.
Selection (core/states/selection.py) judges each distinct state once; minimization (core/judging/shrink.py)
recognises a candidate it has seen; a ledger (campaign/ledger.py) names the states judged in
earlier runs by ``state_key``.

The key (``image_key``) costs O(epoch), not O(cut): with ``base`` the first dropped or torn entry
(else the cut), every data entry before ``base`` is durable and the one at ``base`` is not, so the
durable set is "the first ``ndata[base]`` data entries of the log" plus the kept data entries in
[base, cut) (with torn sectors) -- told by where the kept ones end and which were lost before
that, a few small objects per state that depend on the durable set alone and give it back.  The
keys part is the space's ``key_version`` (the number of key marks that added a key): equal
versions <=> equal (acks, begun).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import CrashSpace

__all__ = ["image_key", "key_name", "state_key"]


def image_key(sp: CrashSpace, state: CrashState) -> Hashable:
    """Equal for two states of ``sp`` iff they replay the same durable data (torn sectors included)
    and carry the same acks and begun keys (and tell the same lie: core/crashmodels/lies.py).
    O(cut - first dropped/torn entry); a few small objects.

    With ``hi`` just past the last data entry the state keeps (``base`` if none), the durable set
    is the first ``ndata[base]`` data entries, then those of [base, hi) but the lost ones (all
    dropped entries below ``hi``), the torn ones with their sectors: (ndata[base], ndata[hi], lost,
    torn) names it and is named by it."""
    base = state.base
    cut = state.cut
    dropped = state.dropped
    data = sp.is_data
    hi, j = cut, len(dropped) - 1
    while hi > base and (not data[hi - 1] or (j >= 0 and dropped[j] == hi - 1)):
        if data[hi - 1]:
            j -= 1
        hi -= 1
    lost = dropped if j == len(dropped) - 1 else dropped[: j + 1]
    key = sp.ndata[base], sp.ndata[hi], lost, state.torn, sp.key_version[cut]
    return (
        key if state.lie is None else (*key, state.lie)
    )  # a lying disk's misplaced, flipped or bad sector


def key_name(keys: Sequence[Hashable]) -> str:
    """A short stable name of the images of one instant's disks (their ``image_key`` each, one per
    disk): each disk's key hashed to 16 hex digits, joined by ``+``.  One disk's name is its
    ``state_key``: a ledger written by an earlier one-disk run still names the same states."""
    # imported here: every checker VM's check job imports this module (core/states/nodes.py) and never names
    # a key; hashlib (with OpenSSL's _hashlib) costs 2.4-2.7 ms natively, measured, 10-50x that under TCG
    import hashlib

    return "+".join(hashlib.blake2b(repr(k).encode(), digest_size=8).hexdigest() for k in keys)


def state_key(sp: CrashSpace, state: CrashState) -> str:
    """A short stable name of a state's image and keys (a hash of ``image_key``): what a ledger of
    states judged in earlier runs of the same log holds (campaign/ledger.py)."""
    return key_name((image_key(sp, state),))
