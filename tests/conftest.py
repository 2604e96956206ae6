"""Every test runs offline: nothing may reach the Hugging Face hub (set before transformers or
huggingface_hub is imported, and inherited by the subprocesses the tests start)."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
