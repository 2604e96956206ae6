"""The local web app: the server and the HTTP guard in front of it (the page it serves: `report`)."""
