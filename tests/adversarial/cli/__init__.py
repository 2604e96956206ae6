"""The hostile campaign's cli surface (`tests.adversarial`)."""
