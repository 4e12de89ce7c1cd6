"""The cause rules as a registry (pure): one module per durability rule, each declaring its
``base.Rule`` -- id, where it looks (an ack, or the commit the cut fell in), the finding it returns
as facts, its check, its sentence, its counterfactual (what it says was missing, made durable) and
its advice -- listed once, in rank order, in ``registry``.  core/cause/causes.py picks a state's cause
from them, debug/verify.py proves it by counterfactual.

* ``registry`` -- the one list of rules, strongest first; ACK_RULES, CUT_RULES, RANK, IDS and the
  dispatch from a finding to its sentence, note, advice and plan;
* ``base`` -- ``Rule`` (what a rule declares), ``Plan`` (what a counterfactual makes durable),
  ``PlanInput`` and the bounds plans share;
* ``outcomes`` -- the causes that are no broken rule: recovery-bug, disk-lied, unseen-writes,
  beyond-rules;
* ``acked_after_error``, ``rename_before_fsync``, ``sync_still_running`` (ack-before-sync-returned),
  ``no_fsync``, ``no_dir_fsync``, ``no_msync`` -- the rules an ack can break;
* ``replaced_in_place``, ``pointer_before_data``, ``unordered_writes``, ``unchecked_tear`` -- the
  rules about the commit the cut fell in.
"""
