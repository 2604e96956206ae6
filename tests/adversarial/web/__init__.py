"""The hostile campaign's web surface (`tests.adversarial`)."""
