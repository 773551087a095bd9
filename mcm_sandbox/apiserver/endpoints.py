"""The verbs of a resource request, once the HTTP edge (``app.Server``) has authenticated it,
resolved its target and verb and authorized it: kube-apiserver's endpoint handlers
(``k8s.io/apiserver/pkg/endpoints/handlers``: ``GetResource``, ``ListResource``, ``CreateResource``,
``UpdateResource``, ``PatchResource``, ``DeleteResource``, ``DeleteCollection``, and the watch), which
``registerResourceHandlers`` routes to by verb and subresource (``scale``, ``eviction``, ``token``,
``finalize``, ``status``).

Each reads the request's body, calls the store-side verbs (``handlers.Api``, the ``Deleter``, the
reviews) and writes the answer, converted as the Accept header asks for reads (Table,
PartialObjectMetadata).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from mcm_sandbox.apiserver import errors, negotiation, protobuf, reviews, scale, table, views, wire
from mcm_sandbox.apiserver.authn import UserInfo
from mcm_sandbox.apiserver.builtins import review_kind
from mcm_sandbox.apiserver.deletion import delete_options
from mcm_sandbox.apiserver.handlers import APPLY_PATCH, parse_json
from mcm_sandbox.apiserver.routing import Target, sub_allowed, sub_exists
from mcm_sandbox.apiserver.watch import serve_watch

if TYPE_CHECKING:
    from mcm_sandbox.apiserver.app import Server

# The verbs whose answer the Accept header can convert (Table, PartialObjectMetadata[List]).
READS = ("get", "list", "watch")


async def serve(
    server: Server, request: web.Request, t: Target, verb: str, query: dict[str, str], user: UserInfo
) -> web.StreamResponse:
    """Answer one resource request, whose verb the edge resolved and authorized."""
    rt, sub = t.rt, t.sub
    dry_run = bool(query.get("dryRun"))
    if verb not in rt.served_verbs:
        raise errors.method_not_allowed()
    if review_kind(rt):
        body = await wire.object_body(request)
        out = reviews.review(rt, body, user, t.namespace, server.authorizer, server.authenticator)
        return wire.json_response(out, 201)
    if rt.namespaced and t.namespace is None and verb not in ("list", "watch"):
        raise errors.method_not_allowed()
    if t.name is None and verb in ("update", "patch"):
        raise errors.method_not_allowed()
    if sub is not None and not sub_allowed(t, verb):
        raise errors.not_found_path() if not sub_exists(t) else errors.method_not_allowed()
    conv = negotiation.conversion(request.headers.get("Accept", "")) if verb in READS else None
    if verb == "watch":
        return await serve_watch(
            request,
            server.api,
            rt,
            t.namespace,
            query,
            server.watchers,
            server.opts.bookmark_interval,
            conv,
        )
    if verb == "list":
        page, raw, meta = server.api.list(rt, t.namespace, query)
        if conv is not None and conv.kind == negotiation.TABLE:  # the same ListMeta: continue too
            return wire.json_response(
                table.table(rt, [e.obj for e in page], meta, query.get("includeObject", "Metadata"))
            )
        if conv is not None:
            return wire.json_response(negotiation.partial_list([e.obj for e in page], meta, conv, rt.kind))
        return wire.json_response(raw)
    assert t.name is not None or verb in ("create", "deletecollection")
    if verb == "get":
        entry = server.api.must_get(rt, t.namespace, t.name or "")
        if sub == "scale":
            return wire.json_response(scale.scale_of(rt, entry))
        if conv is not None and conv.kind == negotiation.TABLE:
            meta = {"resourceVersion": entry.meta["resourceVersion"]}
            return wire.json_response(
                table.table(rt, [entry.obj], meta, query.get("includeObject", "Metadata"))
            )
        if conv is not None:
            return wire.json_response(negotiation.partial_object(entry.obj, conv, rt.kind))
        return wire.json_response(views.raw(rt.view, entry))
    if verb == "create":
        if sub == "token":
            sa = server.api.must_get(rt, t.namespace, t.name or "")
            body = await wire.object_body(request)
            return wire.json_response(
                reviews.token_request(server.authenticator, sa.obj, body, server.store.get), 201
            )
        if sub == "eviction":
            body = await wire.object_body(request)
            return wire.json_response(
                *server.disruption.evict(rt, t.namespace or "", t.name or "", body, dry_run)
            )
        validation_mode = query.get("fieldValidation", "")
        entry = server.api.create(
            rt,
            t.namespace,
            await wire.object_body(request),
            dry_run,
            validation_mode,
            wire.field_manager(request, query),
        )
        return wire.warned(views.raw(rt.view, entry), 201, server.api.warnings)
    if verb == "update":
        body = await wire.object_body(request)
        if sub == "scale":
            return wire.json_response(
                scale.write_scale(
                    server.api,
                    rt,
                    server.api.must_get(rt, t.namespace, t.name or ""),
                    body,
                    dry_run,
                    wire.field_manager(request, query),
                )
            )
        if sub == "finalize":
            return wire.json_response(_finalize(server, t, body, dry_run).raw)
        updated = server.api.update(
            rt,
            t.namespace,
            t.name or "",
            body,
            sub,
            dry_run,
            wire.field_manager(request, query),
            query.get("fieldValidation", ""),
        )
        return wire.warned(views.raw(rt.view, updated), 200, server.api.warnings)
    if verb == "patch":
        raw = await wire.read_body(request, True)
        ctype = request.headers.get("Content-Type", "")
        if sub == "scale":
            old = server.api.must_get(rt, t.namespace, t.name or "")
            wanted = server.api.apply_patch(rt, scale.scale_of(rt, old), raw, ctype)
            return wire.json_response(
                scale.write_scale(server.api, rt, old, wanted, dry_run, wire.field_manager(request, query))
            )
        if ctype.split(";")[0].strip().lower() == APPLY_PATCH:
            entry, created = server.api.server_side_apply(
                rt, t.namespace, t.name or "", raw, query, sub, dry_run
            )
            return wire.json_response(views.raw(rt.view, entry), 201 if created else 200)
        manager = wire.field_manager(request, query)
        patched = server.api.patch(
            rt,
            t.namespace,
            t.name or "",
            raw,
            ctype,
            sub,
            dry_run,
            manager,
            query.get("fieldValidation", ""),
        )
        return wire.warned(views.raw(rt.view, patched), 200, server.api.warnings)
    raw_opts = await wire.read_body(request, False)
    if not raw_opts.strip():
        given = None
    elif request.content_type.lower() == protobuf.PROTOBUF:
        given = protobuf.decode(raw_opts)
    else:
        given = parse_json(raw_opts)
    opts = delete_options(given, query)
    if verb == "deletecollection":
        return wire.json_response(server.deleter.delete_collection(rt, t.namespace, query, opts, dry_run))
    code, body = server.deleter.delete(rt, t.namespace, t.name or "", opts, dry_run)
    return wire.json_response(body, code)


def _finalize(server: Server, t: Target, body: Any, dry_run: bool) -> Any:
    """namespaces/{name}/finalize: the only way to change spec.finalizers (the namespace controller's)."""
    old = server.api.must_get(t.rt, None, t.name or "")
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request must be a Namespace")
    new = old.clone()
    new.setdefault("spec", {})["finalizers"] = list((body.get("spec") or {}).get("finalizers") or [])
    return server.api.write_update(t.rt, old, new, None, dry_run)
