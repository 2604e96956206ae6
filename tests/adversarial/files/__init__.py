"""The hostile campaign's files surface (`tests.adversarial`)."""
