"""Capture: the one capture point (`trace`) and the interventions it applies (`interventions`)."""
