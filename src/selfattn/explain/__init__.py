"""Explain a real model's attention: trace capture → tables · plots · one HTML file · a local web app."""
