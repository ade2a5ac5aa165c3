"""Zero-code checks: ``pytest --aoti-model=SPEC`` collects one AOTI test per model spec.

``model_spec`` parses and resolves factory specs at startup, ``prefixes`` sends ``hf:``,
``timm:`` and ``torchvision:`` specs to their resolver, ``factories`` calls a factory inside
its test and reads what it returned, ``hf`` builds Hugging Face architectures from tiny
configs, ``timm`` and ``torchvision`` build those libraries' models with random weights
(``vision`` holds what they share), ``collect`` puts the tests into the pytest session.

No torch at import time (``factories`` aside, which only a test loads): the specs resolve
at startup; each model library, an optional dependency, is imported only when a spec names
it, and torch where a library or a test needs it.
"""
