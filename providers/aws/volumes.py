"""GetVolumeIDs: which EBS volumes back a set of PersistentVolumes (used by drain).

Two sources, as upstream: the in-tree ``awsElasticBlockStore`` volume, whose ID comes in three
spellings (``aws://<zone>/vol-x``, ``aws:///vol-x``, ``vol-x``), and volumes of the EBS CSI driver,
whose handle is the volume ID. Anything else belongs to another provider and is skipped; a
malformed in-tree ID is skipped too (logged), so one bad PV cannot block a drain.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

EBS_CSI_DRIVER = "ebs.csi.aws.com"
_EBS_VOLUME_ID = re.compile(r"^vol-[^/]*$")


def ebs_volume_id(kubernetes_volume_id: str) -> str:
    """The EBS ID inside an in-tree volume ID; ``ValueError`` if it is not one."""
    text = (
        kubernetes_volume_id
        if kubernetes_volume_id.startswith("aws://")
        else "aws:///" + kubernetes_volume_id
    )
    url = urlparse(text)
    if url.scheme != "aws":
        raise ValueError(f"invalid scheme for AWS volume {kubernetes_volume_id!r}")
    volume_id = url.path.strip("/")
    if not _EBS_VOLUME_ID.match(volume_id):
        raise ValueError(f"invalid format for AWS volume {kubernetes_volume_id!r}")
    return volume_id


def _volume_id_of(spec: Mapping[str, Any]) -> str | None:
    in_tree = spec.get("awsElasticBlockStore")
    if isinstance(in_tree, Mapping):
        try:
            return ebs_volume_id(str(in_tree.get("volumeID", "")))
        except ValueError as err:
            log.warning("skipping a PersistentVolume: %s", err)
            return None
    csi = spec.get("csi")
    if isinstance(csi, Mapping) and csi.get("driver") == EBS_CSI_DRIVER and csi.get("volumeHandle"):
        return str(csi["volumeHandle"])
    return None


def volume_ids(pv_specs: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """In the order of the specs; PVs of other drivers contribute nothing."""
    found = []
    for spec in pv_specs:
        if spec:
            volume_id = _volume_id_of(spec)
            if volume_id:
                found.append(volume_id)
    return found
