"""MCM's ``machineutils`` descriptions: the words of the deletion flow's ``lastOperation.description``.

Each step writes a description naming the next one, so the description is the flow's state. The flow
(``deletion``) matches them, and so do the machine controller's watches (``watches``), which the
informer's routing reads without importing any controller code: hence a module of their own.
"""

from __future__ import annotations

from typing import Final

GET_VM_STATUS: Final = "Set machine status to termination. Now, getting VM Status"
INITIATE_DRAIN: Final = "Initiate node drain"
DELETE_VOLUME_ATTACHMENTS: Final = "Delete Volume Attachments"
INITIATE_VM_DELETION: Final = "Initiate VM deletion"
INITIATE_NODE_DELETION: Final = "Initiate node object deletion"
INITIATE_FINALIZER_REMOVAL: Final = "Initiate machine object finalizer removal"

#: mcm-tasks's own waits of the flow (lifecycle hooks): each ends with the step it holds, so the flow
#: stays at that step; the machine's ``Deleting`` condition tells the wait by these beginnings
WAITING_FOR_PRE_DRAIN_HOOK: Final = "Waiting for pre-drain hooks to be removed:"
WAITING_FOR_PRE_TERMINATE_HOOK: Final = "Waiting for pre-terminate hooks to be removed:"
