"""The suite's tests, in folders by subject; ``helpers.py`` holds what two test files share, ``conftest.py`` the
suite's options (``--peers``, the Hypothesis profiles, the GPU's). Not installed with the package."""
