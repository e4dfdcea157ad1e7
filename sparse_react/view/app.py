"""The web app: Starlette routes over the named run folders, each page rendered from the records."""

from __future__ import annotations

import secrets
from functools import partial
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from sparse_react.errors import UserError
from sparse_react.view.links import ServerLinks
from sparse_react.view.pages import (
    OTHERS_SHOWN, EpisodeRow, Filters, Sort, compare_page, entry_views, episodes_page, page_number, runs_page, same_game)
from sparse_react.view.records import RunSet
from sparse_react.view.render import render
from sparse_react.view.steer import PolicyFor, Steering, run_policy, steer, steering

LINKS = ServerLinks()
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
TOKEN_COOKIE = "sparse_react_token"


def host_name(netloc: str) -> str:
    """The host of a Host header or an Origin's netloc, without port or IPv6 brackets, lower-cased."""
    return (urlsplit("//" + netloc).hostname or "") if netloc else ""


def create_app(paths: Sequence[Path | str], policy_for: PolicyFor | None = None,
               allowed_hosts: Sequence[str] = LOOPBACK_NAMES, token: str | None = None,
               endpoint: str | None = None, cache: bool = True) -> Starlette:
    """An app over the run folders (or record files) in `paths`, the only files it reads or writes.

    `allowed_hosts` are the names it answers to: a request whose Host names another, or a post
    whose Origin is not that Host (another site, or another port), is refused, so a page elsewhere cannot reach it through a name that resolves to
    this machine (DNS rebinding). With `token` (a bind beyond loopback) every request needs it:
    `?token=...` once, then a same-site cookie. `policy_for` picks who carries on after a thought
    is edited; by default the run's own policy, and for a served model the server at `endpoint`
    (the one the user named; a record's endpoint is never contacted). Each record is read once and
    again when its file changes; `cache=False` reads every record on every page (as before)."""
    runs = RunSet(paths, cache=cache)
    hosts = {name.strip("[]").lower() for name in allowed_hosts}
    carry_on = policy_for or partial(run_policy, endpoint=endpoint)

    def page(template: str, status: int = 200, **values) -> HTMLResponse:
        return HTMLResponse(render(template, LINKS, **values), status_code=status)

    def refused(title: str, status: int = 403) -> HTMLResponse:
        return page("error.html", status, title=title, heading="Refused")

    async def guard(request: Request, call_next) -> Response:
        if host_name(request.headers.get("host", "")) not in hosts:
            return refused("this view does not answer to that host name", 400)
        origin = request.headers.get("origin")
        if request.method != "GET" and origin and urlsplit(origin).netloc.lower() != request.headers["host"].lower():
            return refused("an edit must come from this view's own pages")
        if token is None:
            return await call_next(request)
        given = request.query_params.get("token")
        if given is not None and secrets.compare_digest(given, token):  # the printed link: keep it as a cookie
            target = request.url.remove_query_params("token")
            response = RedirectResponse(target.path + (f"?{target.query}" if target.query else ""), status_code=303)
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
            return response
        if secrets.compare_digest(request.cookies.get(TOKEN_COOKIE, ""), token):
            return await call_next(request)
        return refused("this view needs the token it printed when it started: open the link it printed")

    def not_found(exc: Exception) -> HTMLResponse:
        return page("error.html", 404, title=str(exc))

    async def runs_view(request: Request) -> Response:
        return page("runs.html", page=runs_page(runs.runs()))

    async def episodes_view(request: Request) -> Response:
        query = request.query_params
        filters = Filters(**{k: query.get(k, "") for k in Filters.__dataclass_fields__})
        return page("episodes.html", page=episodes_page(runs.runs(), filters, Sort.parse(query.get("sort", "")),
                                                        page_number(query.get("page", ""))))

    def episode_page(run_index: int, index: int, message: str = "", status: int = 200) -> Response:
        try:
            run, episode = runs.episode(run_index, index)
        except LookupError as exc:
            return not_found(exc)
        others = [r for r in same_game(runs.runs(), episode) if (r.run.index, r.index) != (run_index, index)]
        return page("episode.html", status, row=EpisodeRow(run, index, episode), entries=entry_views(episode, run.anatomy(index)),
                    others=others[:OTHERS_SHOWN], more_others=len(others) - len(others[:OTHERS_SHOWN]),
                    message=message,
                    steering=Steering(True, "") if policy_for else steering(run, episode, endpoint))

    async def episode_view(request: Request) -> Response:
        return episode_page(request.path_params["run"], request.path_params["index"])

    async def compare_view(request: Request) -> Response:
        p = request.path_params
        try:
            left_run, left = runs.episode(p["run"], p["index"])
            right_run, right = runs.episode(p["other_run"], p["other_index"])
        except LookupError as exc:
            return not_found(exc)
        if left.game_name != right.game_name:
            return page("error.html", 400, heading="Different games",
                        title=f"side by side needs two episodes of one game: {left.game_name} and {right.game_name} differ")
        return page("compare.html", page=compare_page(EpisodeRow(left_run, p["index"], left),
                                                      EpisodeRow(right_run, p["other_index"], right)))

    async def steer_view(request: Request) -> Response:
        run_index, index = request.path_params["run"], request.path_params["index"]
        form = await request.form()
        try:
            step = int(str(form.get("step", "")))
        except ValueError:
            return episode_page(run_index, index, f"step {form.get('step')!r} is not a step number", 400)
        try:
            new = await run_in_threadpool(steer, runs, run_index, index, step, str(form.get("thought", "")),
                                          form.get("mode") == "insert", carry_on)
        except LookupError as exc:
            return not_found(exc)
        except UserError as exc:
            return episode_page(run_index, index, str(exc), 400)
        return RedirectResponse(LINKS.compare(run_index, index, run_index, new), status_code=303)

    routes = [
        Route("/", runs_view),
        Route("/episodes", episodes_view),
        Route("/runs/{run:int}/episodes/{index:int}", episode_view),
        Route("/runs/{run:int}/episodes/{index:int}/steer", steer_view, methods=["POST"]),
        Route("/compare/{run:int}/{index:int}/{other_run:int}/{other_index:int}", compare_view),
    ]
    return Starlette(routes=routes, middleware=[Middleware(BaseHTTPMiddleware, dispatch=guard)],
                     exception_handlers={404: lambda request, exc: not_found(LookupError("no such page"))})
