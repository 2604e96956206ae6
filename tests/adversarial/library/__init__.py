"""The hostile campaign's library surface (`tests.adversarial`)."""
