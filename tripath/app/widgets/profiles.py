"""Which profiles the app can use: the shipped ones and the ones uploaded this session.

Uploads are JSON only, size-capped, and validated by tripath.profile.profile's own parser
(``Profile.from_dict``) before they are kept; a bad upload raises InputError and leaves the
session's list untouched. A profile travels between pages (and into the cache keys) as its JSON
text, so an edited file on disk or a different upload is a different cache entry.
"""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from tripath.app.widgets.provenance import profile_badge
from tripath.core.data_dirs import PROFILES_DIR
from tripath.core.errors import InputError
from tripath.profile.profile import MAX_PROFILE_BYTES, Profile, available_profiles

UPLOADED = "uploaded_profiles"  # session_state: {display name: JSON text}
UPLOAD_PREFIX = "uploaded: "


def uploaded() -> dict[str, str]:
    """This session's validated uploads (display name -> JSON text)."""
    return st.session_state.setdefault(UPLOADED, {})


def choices() -> list[str]:
    """Shipped profile names, then this session's uploads."""
    return available_profiles() + sorted(uploaded())


def profile_text(name: str) -> str:
    """The JSON text of a shipped profile (by name) or of an upload (by display name)."""
    if name in uploaded():
        return uploaded()[name]
    path = PROFILES_DIR / f"{name}.json"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(path), None, "no such profile file") from None


@st.cache_data(show_spinner=False, max_entries=32)
def parse_profile(text: str, source: str) -> Profile:
    """Validate profile JSON through tripath.profile.profile (the one reader of profiles)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(source, f"line {err.lineno}", f"malformed JSON: {err.msg} (column {err.colno})") from None
    return Profile.from_dict(raw, source=source)


def load(name: str) -> Profile:
    return parse_profile(profile_text(name), name)


def load_shown(name: str) -> Profile | None:
    """The profile, its provenance badge shown; None after showing why it would not load (the page returns)."""
    try:
        profile = load(name)
    except InputError as err:
        st.error(str(err))
        return None
    profile_badge(profile)
    return profile


def validate_upload(filename: str, data: bytes) -> Profile:
    """Check an uploaded file before anything keeps it: .json, at most MAX_PROFILE_BYTES, a valid profile."""
    if Path(filename).suffix.lower() != ".json":
        raise InputError(filename, None, "profiles are JSON files (.json)")
    if len(data) > MAX_PROFILE_BYTES:
        raise InputError(filename, None, f"{len(data):,} bytes is over the {MAX_PROFILE_BYTES:,}-byte limit "
                                         "for an uploaded profile")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(filename, None, "not UTF-8 text") from None
    return parse_profile(text, filename)


def keep_upload(filename: str, data: bytes) -> str:
    """Validate, then add to the session's uploads; returns the display name. Raises InputError first."""
    validate_upload(filename, data)
    name = f"{UPLOAD_PREFIX}{filename}"
    uploaded()[name] = data.decode("utf-8")
    return name
