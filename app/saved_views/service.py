"""Saved views: the only writer of the saved_views table. Functions flush; the caller commits.

Who sees what: a shared view is every member's to open; a private one only its owner's (to
anyone else it does not exist: 404, app.ownership.find_view). Only the owner (or an admin)
deletes a view. An experiment's default view is chosen by whoever may change the experiment
(its owner or an admin) among the views everyone can open (shared ones of that experiment).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.auth.models import User
from app.errors import Invalid, NotFound
from app.experiments.models import Experiment
from app.ownership import check_write, find_experiment
from app.saved_views.models import SavedView
from app.saved_views.schemas import ViewCreate, ViewOut, ViewState


def view_url(view: SavedView) -> str:
    """The page that opens the view: its experiment's page with `?view=ID`."""
    if view.experiment_id is None:
        return f"/experiments?view={view.id}"
    return f"/experiments/{view.experiment_id}?view={view.id}"


def create_view(session: Session, *, owner: User, data: ViewCreate) -> SavedView:
    if data.experiment_id is not None:
        try:
            find_experiment(data.experiment_id, session, owner, write=False)
        except NotFound as exc:
            raise Invalid.at(["body", "experiment_id"], exc.detail, data.experiment_id) from None
    view = SavedView(
        owner_id=owner.id,
        experiment_id=data.experiment_id,
        name=data.name,
        shared=data.shared,
        state=data.state.model_dump(mode="json"),
    )
    session.add(view)
    session.flush()
    return view


def visible_views(
    session: Session, *, user: User, experiment_id: int | None = None
) -> Sequence[SavedView]:
    """The caller's views and the shared ones, of one experiment when asked; by name."""
    stmt = select(SavedView).where(or_(SavedView.owner_id == user.id, SavedView.shared))
    if experiment_id is not None:
        stmt = stmt.where(SavedView.experiment_id == experiment_id)
    return session.scalars(stmt.order_by(SavedView.name, SavedView.id)).all()


def delete_view(session: Session, *, view: SavedView) -> None:
    session.delete(view)
    session.flush()


def set_default(session: Session, *, view: SavedView, user: User, default: bool) -> SavedView:
    """Make `view` its experiment's default (replacing the one before), or no longer."""
    if view.experiment_id is None:
        raise Invalid.at(
            ["body", "default"], "this view belongs to no experiment: it cannot be a default", True
        )
    experiment = session.get(Experiment, view.experiment_id)
    assert experiment is not None  # the foreign key cascades
    check_write(user, experiment.owner_id, "experiment")
    if not default:
        view.default_of = None
        session.flush()
        return view
    if not view.shared:
        raise Invalid.at(
            ["body", "default"],
            "only a shared view can be the experiment's default: the team must be able to open it",
            True,
        )
    session.execute(
        update(SavedView)
        .where(SavedView.default_of == experiment.id, SavedView.id != view.id)
        .values(default_of=None)
    )
    view.default_of = experiment.id
    session.flush()
    return view


def to_out(session: Session, views: Sequence[SavedView]) -> list[ViewOut]:
    owner_ids = {v.owner_id for v in views}
    names: dict[int, str] = {}
    if owner_ids:
        rows = session.execute(select(User.id, User.username).where(User.id.in_(owner_ids)))
        names = {user_id: username for user_id, username in rows}
    return [
        ViewOut(
            id=v.id,
            name=v.name,
            owner_id=v.owner_id,
            owner=names.get(v.owner_id, "?"),
            experiment_id=v.experiment_id,
            shared=v.shared,
            is_default=v.default_of is not None,
            state=ViewState.model_validate(v.state),
            url=view_url(v),
            created_at=v.created_at,
        )
        for v in views
    ]
