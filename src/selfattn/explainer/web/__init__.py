"""The local web app: the server and the HTTP guard in front of it (the page it serves: `report`)."""

from ...extras import require

require("serve", "the web app (selfattn serve)")  # not in a core install: one line naming the extra
