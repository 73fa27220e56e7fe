"""The account pages: "my account" (password, API tokens) for everyone, and the users page
for admins (add a user with a one-time initial password, change a role, disable, reset a
password). Forms post back with the CSRF token as a field; a secret (a new token, an initial
or reset password) is shown once, in the response to the post that made it, never again."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.auth.deps import request_token
from app.auth.models import Role, User
from app.auth.security import generate_password
from app.auth.service import create_token, listed_tokens, revoke_token_id
from app.db import SessionDep
from app.errors import Conflict, Forbidden, Invalid, NotFound, field_error
from app.http_errors import status_of
from app.pages import PageRoute, PageUser
from app.runs.files.disk import disk_by_owner
from app.settings import get_settings
from app.templating import render
from app.users import ceilings, service
from app.users.schemas import CeilingsIn

router = APIRouter(include_in_schema=False, route_class=PageRoute)


# --- my account ----------------------------------------------------------------------------


def _account(
    request: Request,
    session: SessionDep,
    user: User,
    *,
    status_code: int = 200,
    **context: object,
) -> HTMLResponse:
    return render(
        request,
        "account.html",
        user=user,
        tokens=listed_tokens(session, user=user),
        disk_bytes=disk_by_owner(session, [user.id]).get(user.id, 0),
        min_length=get_settings().password_min_length,
        max_token_days=int(get_settings().token_max_ttl_hours // 24),
        status_code=status_code,
        **context,
    )


DONE = {"password": "Your password was changed."}  # ?done= after a form's redirect


@router.get("/account", response_class=HTMLResponse)
def account_page(
    request: Request, session: SessionDep, user: PageUser, done: str | None = None
) -> HTMLResponse:
    notice = DONE.get(done or "")
    if notice is None:
        return _account(request, session, user)
    return _account(request, session, user, notice=notice)


@router.post("/account/password", response_class=HTMLResponse, response_model=None)
def change_password(
    request: Request,
    session: SessionDep,
    user: PageUser,
    current_password: Annotated[str, Form(max_length=1000)],
    new_password: Annotated[str, Form(max_length=1000)],
) -> Response:
    """Post, redirect, get (issue 41): a changed password leaves /account in the address bar
    (a reload does not post the form again); a refused one is the form again with its error."""
    try:
        service.change_own_password(
            session,
            user=user,
            current_password=current_password,
            new_password=new_password,
            current_token=request_token(request),
        )
    except Invalid as exc:
        return _account(request, session, user, status_code=422, password_error=exc.detail)
    return RedirectResponse("/account?done=password", status_code=303)


@router.post("/account/tokens", response_class=HTMLResponse)
def create_token_form(
    request: Request,
    session: SessionDep,
    user: PageUser,
    name: Annotated[str, Form(min_length=1, max_length=100)],
    days: Annotated[float, Form(gt=0, allow_inf_nan=False)] = 30,
) -> HTMLResponse:
    """A token from the page (a browser session, CSRF-checked): at most token_max_ttl_hours,
    like the API; unlike the API it may outlive the session that asks (a session lasts a
    week, a CLI token for a month is what the form is for)."""
    cap = get_settings().token_max_ttl_hours
    if days * 24 > cap:
        return _account(
            request,
            session,
            user,
            status_code=422,
            token_error=f"a token may live at most {cap / 24:g} days",
        )
    row, secret = create_token(session, user=user, ttl_hours=days * 24, name=name)
    return _account(request, session, user, new_token=secret, new_token_name=row.name)


@router.post("/account/tokens/{token_id}/revoke")
def revoke_token_form(token_id: int, session: SessionDep, user: PageUser) -> Response:
    """The same rule as DELETE /api/tokens/{id}: yours (an admin: anyone's); another user's
    token is 404."""
    if revoke_token_id(session, token_id=token_id, user=user) is None:
        raise NotFound.of("token", token_id)
    return RedirectResponse("/account", status_code=303)


# --- the users page (admins) ---------------------------------------------------------------


async def page_admin(user: PageUser) -> User:
    if not user.is_admin:
        raise Forbidden("Only admins manage users. Ask one of them to add or change an account.")
    return user


PageAdmin = Annotated[User, Depends(page_admin)]


def _users(
    request: Request, session: SessionDep, user: User, *, status_code: int = 200, **context: object
) -> HTMLResponse:
    return render(
        request,
        "admin_users.html",
        user=user,
        users=(listed := service.list_users(session)),
        disk=disk_by_owner(session, [u.id for u in listed]),
        roles=list(Role),
        min_length=get_settings().password_min_length,
        ceilings=_ceilings_table(session, listed),
        ceiling_fields=ceilings.FIELDS,
        ceiling_units=ceilings.UNITS,
        status_code=status_code,
        **context,
    )


def _ceilings_table(session: Session, users: list[User]) -> list[dict[str, object]]:
    """The ceilings section's rows: the box's defaults, each role, each user with some set."""
    roles, by_user = ceilings.listed(session)
    empty = ceilings.Ceilings()
    rows: list[dict[str, object]] = [
        {"scope": "box", "label": "box (defaults)", "values": ceilings.box_defaults()}
    ]
    rows += [
        {"scope": f"role:{r.value}", "label": f"role {r.value}", "values": roles.get(r, empty)}
        for r in Role
    ]
    rows += [
        {"scope": f"user:{u.id}", "label": u.username, "values": by_user[u.id]}
        for u in users
        if u.id in by_user
    ]
    return rows


@router.post("/admin/ceilings", response_class=HTMLResponse)
def set_ceilings_form(
    request: Request,
    session: SessionDep,
    admin: PageAdmin,
    scope: Annotated[str, Form(pattern=r"^(role:(admin|member|viewer)|user:\d{1,18})$")],
    memory_gb: Annotated[str, Form(max_length=40)] = "",
    cpus: Annotated[str, Form(max_length=40)] = "",
    disk_gb: Annotated[str, Form(max_length=40)] = "",
    max_processes: Annotated[str, Form(max_length=40)] = "",
) -> HTMLResponse:
    """The same rules as PUT /api/ceilings/roles/{role} and /users/{id}: a field left empty
    falls back (the role's, then the box's)."""
    kind, _, ident = scope.partition(":")
    given = {"memory_gb": memory_gb, "cpus": cpus, "disk_gb": disk_gb}
    given["max_processes"] = max_processes
    try:
        data = CeilingsIn.model_validate({k: v.strip() or None for k, v in given.items()})
    except ValidationError as exc:
        errors = [field_error(["body", *e["loc"]], e["msg"], e.get("input")) for e in exc.errors()]
        return _users(request, session, admin, status_code=422, error=Invalid(errors).detail)
    values = ceilings.Ceilings(**data.model_dump())
    if kind == "role":
        ceilings.set_ceilings(session, values, role=Role(ident))
        where = f"role {ident}"
    else:
        target = service.get_user(session, int(ident))
        ceilings.set_ceilings(session, values, user=target)
        where = target.username
    return _users(request, session, admin, notice=f"Ceilings of {where} saved.")


@router.get("/admin/users", response_class=HTMLResponse)
def users_page(request: Request, session: SessionDep, admin: PageAdmin) -> HTMLResponse:
    return _users(request, session, admin)


@router.post("/admin/users", response_class=HTMLResponse)
def add_user_form(
    request: Request,
    session: SessionDep,
    admin: PageAdmin,
    username: Annotated[str, Form(max_length=200)],
    role: Annotated[Role, Form()] = Role.member,
    password: Annotated[str, Form(max_length=1000)] = "",
    how: Annotated[str, Form(pattern="^(password|invite)$")] = "password",
) -> HTMLResponse:
    """`how=password`: the password given, or (empty) one generated and shown once, to hand
    over. `how=invite`: a link, shown once, with which the new user sets their own."""
    initial = password or generate_password()
    try:
        if how == "invite":
            added, secret = service.invite_user(session, username=username, role=role)
        else:
            added = service.add_user(
                session, username=username, password=initial, role=role, temporary=not password
            )
    except (Invalid, Conflict) as exc:
        return _users(request, session, admin, status_code=status_of(exc), error=exc.detail)
    notice = f"Added {added.username} ({added.role})."
    if how == "invite":
        hours = get_settings().invite_ttl_hours
        link = str(request.url_for("invite_page", secret=secret))
        return _users(
            request, session, admin, notice=notice, invite=link, invite_hours=hours,
            secret_for=added.username,
        )  # fmt: skip
    return _users(
        request,
        session,
        admin,
        secret_for=added.username,
        secret=None if password else initial,
        notice=notice,
    )


@router.post("/admin/users/{user_id}", response_class=HTMLResponse)
def change_user_form(
    request: Request,
    session: SessionDep,
    admin: PageAdmin,
    user_id: int,
    action: Annotated[str, Form(pattern="^(role|disable|enable|reset-password)$")],
    role: Annotated[Role | None, Form()] = None,
) -> HTMLResponse:
    """One form per row: change the role, disable, enable, or reset the password (a new one is
    generated and shown once)."""
    target = service.get_user(session, user_id)
    secret = None
    try:
        if action == "role" and role is not None:
            service.set_role(session, user=target, role=role)
            notice = f"{target.username} is now {target.role}."
        elif action in ("disable", "enable"):
            service.set_disabled(session, user=target, disabled=action == "disable")
            notice = f"{target.username} is {action}d."
        elif action == "reset-password":
            secret = generate_password()
            service.set_password(session, user=target, password=secret, temporary=True)
            notice = f"New password for {target.username}."
        else:
            notice = "Nothing changed: pick a role."
    except (Invalid, Conflict) as exc:
        return _users(request, session, admin, status_code=status_of(exc), error=exc.detail)
    return _users(request, session, admin, notice=notice, secret=secret, secret_for=target.username)


# --- invite links (no login: the link is the credential) -------------------------------------

INVALID_INVITE = (
    "This invite link is not valid any more (used, expired, or the account was changed): "
    "ask an admin for a new one."
)


@router.get("/invite/{secret}", response_class=HTMLResponse, name="invite_page")
def invite_page(request: Request, session: SessionDep, secret: str) -> HTMLResponse:
    user = service.user_for_invite(session, secret)
    if user is None:
        raise NotFound(INVALID_INVITE)  # PageRoute: the friendly 404 page
    return _invite(request, user)


@router.post("/invite/{secret}", response_model=None)
def accept_invite(
    request: Request,
    session: SessionDep,
    secret: str,
    new_password: Annotated[str, Form(max_length=1000)],
) -> Response:
    """Sets the first password and closes the link; then the login page."""
    user = service.user_for_invite(session, secret)
    if user is None:
        raise NotFound(INVALID_INVITE)  # PageRoute: the friendly 404 page
    try:
        service.accept_invite(session, user=user, password=new_password)
    except Invalid as exc:
        return _invite(request, user, status_code=422, error=exc.detail)
    return RedirectResponse("/login", status_code=303)


def _invite(
    request: Request, user: User, *, status_code: int = 200, error: str | None = None
) -> HTMLResponse:
    return render(
        request,
        "invite.html",
        user=None,
        invited=user.username,
        min_length=get_settings().password_min_length,
        error=error,
        status_code=status_code,
    )
