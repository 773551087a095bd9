"""Impersonation (``kubectl --as``/``--as-group``): act as another user when allowed to.

Upstream's ``WithImpersonation`` filter: the caller needs ``impersonate`` on ``users`` (or on the
``serviceaccounts`` object for a service-account name) and on each ``groups`` entry; the request
then runs as the impersonated user, with ``system:authenticated`` added as upstream adds it.
"""

from __future__ import annotations

from collections.abc import Mapping

from mcm_sandbox.apiserver import errors
from mcm_sandbox.apiserver.authn import AUTHENTICATED, UserInfo, service_account_user, split_service_account
from mcm_sandbox.apiserver.rbac import Attributes, Authorizer

USER_HEADER = "Impersonate-User"
GROUP_HEADER = "Impersonate-Group"
UID_HEADER = "Impersonate-Uid"


def impersonate(user: UserInfo, headers: Mapping[str, str], authorizer: Authorizer | None) -> UserInfo:
    wanted = headers.get(USER_HEADER, "")
    groups = list(headers.getall(GROUP_HEADER, [])) if hasattr(headers, "getall") else []
    if not wanted:
        if groups or headers.get(UID_HEADER):
            raise errors.ApiError(
                500,
                "InternalError",
                "Internal error occurred: requested impersonation of groups without user",
            )
        return user
    checks: list[Attributes] = []
    sa = split_service_account(wanted)
    if sa is not None:
        checks.append(Attributes(user, "impersonate", sa[0], "", "serviceaccounts", name=sa[1]))
    else:
        checks.append(Attributes(user, "impersonate", "", "", "users", name=wanted))
    checks.extend(Attributes(user, "impersonate", "", "", "groups", name=g) for g in groups)
    if authorizer is not None:
        for attrs in checks:
            allowed, reason = authorizer.authorize(attrs)
            if not allowed:
                raise errors.rbac_forbidden(attrs, reason)
    if sa is not None and not groups:
        return service_account_user(sa[0], sa[1])
    if wanted != "system:anonymous" and AUTHENTICATED not in groups:
        groups.append(AUTHENTICATED)
    return UserInfo(wanted, tuple(groups), headers.get(UID_HEADER, ""))
