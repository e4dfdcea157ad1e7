"""The web app: Starlette routes over the named run folders, each page rendered from the records."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from sparse_react.errors import UserError
from sparse_react.view.links import ServerLinks
from sparse_react.view.pages import EpisodeRow, Filters, compare_page, entry_views, episodes_page, runs_page, same_game
from sparse_react.view.records import RunSet
from sparse_react.view.render import render
from sparse_react.view.steer import PolicyFor, run_policy, steer

LINKS = ServerLinks()
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def create_app(paths: Sequence[Path | str], policy_for: PolicyFor = run_policy,
               allowed_hosts: Sequence[str] = ("*",)) -> Starlette:
    """An app over the run folders (or record files) in `paths`, the only files it reads or writes.
    `policy_for` picks who carries on after a thought is edited (by default the run's own policy);
    `allowed_hosts` are the Host names it answers (the loopback names when it listens there, so a
    page elsewhere cannot reach it through a name that resolves to this machine)."""
    runs = RunSet(paths)

    def page(template: str, status: int = 200, **values) -> HTMLResponse:
        return HTMLResponse(render(template, LINKS, **values), status_code=status)

    def not_found(exc: Exception) -> HTMLResponse:
        return page("error.html", 404, title=str(exc))

    async def runs_view(request: Request) -> Response:
        return page("runs.html", page=runs_page(runs.runs()))

    async def episodes_view(request: Request) -> Response:
        query = request.query_params
        filters = Filters(**{k: query.get(k, "") for k in Filters.__dataclass_fields__})
        return page("episodes.html", page=episodes_page(runs.runs(), filters))

    def episode_page(run_index: int, index: int, message: str = "", status: int = 200) -> Response:
        try:
            run, episode = runs.episode(run_index, index)
        except LookupError as exc:
            return not_found(exc)
        others = [r for r in same_game(runs.runs(), episode) if (r.run.index, r.index) != (run_index, index)]
        return page("episode.html", status, row=EpisodeRow(run, index, episode), entries=entry_views(episode),
                    others=others, message=message)

    async def episode_view(request: Request) -> Response:
        return episode_page(request.path_params["run"], request.path_params["index"])

    async def compare_view(request: Request) -> Response:
        p = request.path_params
        try:
            left_run, left = runs.episode(p["run"], p["index"])
            right_run, right = runs.episode(p["other_run"], p["other_index"])
        except LookupError as exc:
            return not_found(exc)
        return page("compare.html", page=compare_page(EpisodeRow(left_run, p["index"], left),
                                                      EpisodeRow(right_run, p["other_index"], right)))

    async def steer_view(request: Request) -> Response:
        run_index, index = request.path_params["run"], request.path_params["index"]
        origin = request.headers.get("origin")
        if origin and urlsplit(origin).netloc != request.headers.get("host"):  # a form posted from another site
            return page("error.html", 403, title="an edit must come from this app's own pages")
        form = await request.form()
        try:
            step = int(str(form.get("step", "")))
        except ValueError:
            return episode_page(run_index, index, f"step {form.get('step')!r} is not a step number", 400)
        try:
            new = await run_in_threadpool(steer, runs, run_index, index, step, str(form.get("thought", "")),
                                          form.get("mode") == "insert", policy_for)
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
    return Starlette(routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))],
                     exception_handlers={404: lambda request, exc: not_found(LookupError("no such page"))})
