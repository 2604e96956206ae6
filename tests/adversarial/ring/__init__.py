"""The hostile campaign's ring surface (`tests.adversarial`)."""
