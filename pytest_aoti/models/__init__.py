"""Zero-code checks: ``pytest --aoti-model=SPEC`` collects one AOTI test per model spec.

``spec`` parses and resolves specs at startup, ``factories`` calls a factory inside its test
and reads what it returned, ``hf`` builds Hugging Face architectures from tiny configs,
``collect`` puts the tests into the pytest session. No torch at import time.
"""
