"""Message catalogues of the explanations: gettext ``.mo`` files in ``embedcalc/locale/<lang>/LC_MESSAGES``.

Message ids are stable keys (``heads.reshape``) and every language, English included, is one ``.po`` file with
its compiled ``.mo`` beside it (``python scripts/compile_messages.py``; a test checks they agree), so adding a
language is adding a file. Messages are ``str.format`` templates with named fields; text between backticks is
a code term (rendered in code style, never translated).
"""

from __future__ import annotations

import functools
import gettext
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DOMAIN = "embedcalc"
LANGUAGES = ("en", "zh")
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
# gettext's order (GNU gettext manual, "Locale Environment Variables"): LANGUAGE, then the POSIX chain
_LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


def language_from_env(environ: Mapping[str, str]) -> str:
    """The language the locale asks for (``zh_CN.UTF-8`` -> ``zh``); ``en`` when unset, C/POSIX or unsupported.

    The first variable that is set decides, except ``LANGUAGE`` (a list such as ``fr:zh``), which is skipped when
    it names no supported language.
    """
    for variable in _LOCALE_VARIABLES:
        value = environ.get(variable, "")
        if not value:
            continue
        for item in value.split(":"):
            code = item.split(".")[0].split("@")[0].split("_")[0].split("-")[0].lower()
            if code in LANGUAGES:
                return code
        if variable != "LANGUAGE":
            return "en"
    return "en"


@functools.cache
def catalogue(lang: str) -> gettext.NullTranslations:
    """The translations for ``lang``, falling back to English for a message a catalogue lacks."""
    english = gettext.translation(DOMAIN, LOCALE_DIR, languages=["en"])
    if lang == "en":
        return english
    translations = gettext.translation(DOMAIN, LOCALE_DIR, languages=[lang])
    translations.add_fallback(english)
    return translations


class Messages:
    """``messages("heads.reshape", h=10)``: the template for the key in this language, formatted."""

    def __init__(self, lang: str) -> None:
        if lang not in LANGUAGES:
            raise ValueError(f"unsupported language {lang!r}; choose one of {', '.join(LANGUAGES)}")
        self.lang = lang
        self._translations = catalogue(lang)

    def __call__(self, key: str, **values: Any) -> str:
        template = self._translations.gettext(key)
        return template.format(**values) if values else template
