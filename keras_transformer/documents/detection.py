"""Which of the served languages a text is written in: `POST /detect` and `source: "auto"` of
`keras-transformer serve`.

Lingua (`lingua-language-detector`, Apache-2.0; the `detect` extra) restricted to the served
languages: its n-gram models ship inside the wheel, so nothing is downloaded at run time, and
choosing among two to a few languages is both faster and more accurate than among all 75 it
knows (benchmarks/detection.py; the table is in docs/serving.md). Lingua is imported when a
detector of two languages or more is built, never for a single served language.

Language codes are LibreTranslate's: an ISO 639-1 code, optionally with a region or script
(`"pt-BR"`, `"zh-Hans"`), or `"zt"` (LibreTranslate's Traditional Chinese). Codes of one
language (`"pt"` and `"pt-BR"`) cannot be told apart by their text: they share that language's
confidence and come in the order given.
"""

# LibreTranslate's codes that are no ISO 639-1 code (before the region or script).
ALIASES = {"zt": "zh"}


def library_languages():
    """The ISO 639-1 codes that Lingua detects, sorted (75 in Lingua 2.1)."""
    from lingua import Language

    return sorted(language.iso_code_639_1.name.lower() for language in Language.all())


def iso_code(code):
    """The ISO 639-1 code of a LibreTranslate code: `"pt-BR"` -> `"pt"`, `"zt"` -> `"zh"`."""
    base = code.replace("_", "-").split("-")[0].lower()
    return ALIASES.get(base, base)


class LanguageDetector:
    """Ranks the served languages by how likely a text is written in each.

    Built once (a server builds one for its source languages); the models of the languages
    given are loaded at once, so the first `detect` is as fast as the others.

    Args:
        languages: list of str. The language codes to choose among, as served (`"es"`, `"en"`,
            `"pt-BR"`, `"zh-Hans"`). One code needs no library: `detect` returns it.

    Example:

    >>> detector = LanguageDetector(["es", "en"])
    >>> detector.detect("¿Dónde está la biblioteca?")[0][0]
    'es'
    >>> LanguageDetector(["es"]).detect("anything")
    [('es', 100.0)]
    """

    def __init__(self, languages):
        if isinstance(languages, str) or not isinstance(languages, (list, tuple)):
            raise ValueError(
                f"`languages` must be a list of language codes. Received: languages={languages!r}"
            )
        if not languages or not all(isinstance(code, str) and code for code in languages):
            raise ValueError(
                "`languages` must hold at least one non-empty language code. "
                f"Received: languages={languages!r}"
            )
        if len(set(languages)) != len(languages):
            raise ValueError(f"`languages` holds a code twice. Received: languages={languages!r}")
        self.languages = tuple(languages)
        self._iso_codes = {code: iso_code(code) for code in self.languages}
        self._detector = None
        distinct = sorted(set(self._iso_codes.values()))
        if len(distinct) < 2:
            return  # One language (maybe under several codes): nothing to tell apart.
        from lingua import IsoCode639_1, LanguageDetectorBuilder

        known = library_languages()
        unknown = [code for code in self.languages if self._iso_codes[code] not in known]
        if unknown:
            raise ValueError(
                f"Language detection does not know {', '.join(map(repr, unknown))}. "
                f"Received: languages={list(self.languages)!r}; the codes it knows (with any "
                f"region or script, as 'pt-BR'): {', '.join(known)}"
            )
        iso_codes = [IsoCode639_1.from_str(code) for code in distinct]
        builder = LanguageDetectorBuilder.from_iso_codes_639_1(*iso_codes)
        self._detector = builder.with_preloaded_language_models().build()

    def detect(self, text, among=None):
        """The served languages, most likely first, with their confidence.

        Args:
            text: str. Any length; at least one character that is not whitespace.
            among: list of str, or `None`. Rank only these codes of `languages` (a server's
                sources that have a model into the requested target), their confidences
                scaled to sum to 100 again. One code is returned at 100 without detection.
                Defaults to `None`: all of `languages`.

        Returns:
            list of `(code, confidence)`: every code (of `among`, else of `languages`) once,
            most likely first; the confidence is a float from 0 to 100 (one decimal), summing
            to about 100 (a language's codes each carry its confidence). A text without
            letters (`"1234"`) gives 0 to all, in the order given.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(
                "`text` must be a string with at least one character that is not whitespace. "
                f"Received: text={text!r}"[:300]
            )
        codes = self.languages if among is None else tuple(among)
        if among is not None and (not codes or not set(codes) <= set(self.languages)):
            raise ValueError(
                f"`among` must hold some of the codes of `languages` ({list(self.languages)}). "
                f"Received: among={among!r}"
            )
        if self._detector is None or len({self._iso_codes[code] for code in codes}) == 1:
            return [(code, 100.0) for code in codes]
        values = self._detector.compute_language_confidence_values(text)
        confidence = {value.language.iso_code_639_1.name.lower(): value.value for value in values}
        total = sum(confidence.get(iso, 0.0) for iso in {self._iso_codes[code] for code in codes})
        ranked = [
            (code, round(100.0 * confidence.get(self._iso_codes[code], 0.0) / total, 1))
            if total > 0
            else (code, 0.0)
            for code in codes
        ]
        return sorted(ranked, key=lambda candidate: -candidate[1])  # Stable: ties as given.
