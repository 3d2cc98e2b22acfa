"""Naming the provider that served a model, for sources that record only the model's name.

Agent frameworks (OpenHands, SWE-agent, tau2-bench) call models through LiteLLM and log the model
name, not the provider. LiteLLM's own routing prefix (`anthropic/claude-...`, `bedrock/...`,
`openrouter/...`) names the provider where it is present; otherwise the model family does.
"""

from __future__ import annotations

# Model-name prefixes of the families whose provider is unambiguous, checked in order.
FAMILIES = (
    ("claude", "anthropic"),
    ("gpt-", "openai"),
    ("gpt4", "openai"),
    ("chatgpt", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("text-davinci", "openai"),
    ("gemini", "google"),
    ("mistral", "mistral"),
    ("codestral", "mistral"),
    ("deepseek", "deepseek"),
    ("grok", "xai"),
    ("command", "cohere"),
)


def provider_of(model: str | None) -> str | None:
    """The provider of `model`: LiteLLM's routing prefix if it has one, else its family's provider.

    >>> provider_of("anthropic/claude-sonnet-4-5"), provider_of("gpt-4.1"), provider_of("my-model")
    ('anthropic', 'openai', None)
    """
    if not model:
        return None
    name = model.strip().lower()
    if "/" in name:
        return name.split("/", 1)[0] or None
    for prefix, provider in FAMILIES:
        if name.startswith(prefix):
            return provider
    return None
