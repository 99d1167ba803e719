"""A read-modify-write of one key: notice a user logging in from a new country."""

from restream_kit import emit, on, state

last_country = state.Map(default=None)


@on("login")
def new_country(e):
    before = last_country[e.user]
    if before is not None and before != e.country:
        emit("country_change", user=e.user, before=before, after=e.country)
    last_country[e.user] = e.country
