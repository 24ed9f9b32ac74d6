"""Language detection (`keras_transformer.documents.detection`): accuracy on everyday Spanish
and English sentences and on short phrases, the restriction to the languages given (their
codes as given), the single-language shortcut and the errors."""

import re
import sys

import pytest

from keras_transformer.documents.detection import LanguageDetector, iso_code, library_languages

pytestmark = pytest.mark.one_backend  # Framework-free: no backend involved.

SPANISH = [
    "¿Dónde está la estación de tren más cercana?",
    "Mañana vamos a visitar a mis abuelos en el pueblo.",
    "El informe tiene que estar listo antes del viernes.",
    "No me gusta nada el café sin azúcar.",
    "La reunión se ha aplazado hasta la semana que viene.",
    "Mi hermana trabaja en un hospital de Barcelona.",
    "¿Puedes cerrar la ventana, por favor? Hace frío.",
    "Los precios de la vivienda han subido mucho este año.",
    "Ayer llovió toda la tarde y no pudimos salir.",
    "Este restaurante ofrece un menú del día muy barato.",
    "Necesito renovar el pasaporte antes de viajar.",
    "Los niños juegan en el parque después del colegio.",
    "He perdido las llaves del coche otra vez.",
    "La película empieza a las nueve y media.",
    "¿Cuánto cuesta un billete de ida y vuelta a Madrid?",
    "El médico me ha recomendado caminar todos los días.",
    "Nos mudamos a un piso más grande el mes pasado.",
    "La biblioteca cierra los domingos por la tarde.",
    "Gracias por tu ayuda, no sé qué habría hecho sin ti.",
    "El equipo ganó el partido en el último minuto.",
    "Hay que sacar la basura antes de las diez.",
    "Mi abuela cocina la mejor paella del mundo.",
    "El tren llegó con veinte minutos de retraso.",
    "Quisiera reservar una mesa para cuatro personas.",
    "Este verano queremos ir a la playa con los amigos.",
]
ENGLISH = [
    "Where is the nearest train station?",
    "Tomorrow we are going to visit my grandparents in the village.",
    "The report has to be ready before Friday.",
    "I don't like coffee without sugar at all.",
    "The meeting has been postponed until next week.",
    "My sister works at a hospital in Boston.",
    "Could you close the window, please? It's cold.",
    "House prices have gone up a lot this year.",
    "It rained all afternoon yesterday and we couldn't go out.",
    "This restaurant has a very cheap lunch menu.",
    "I need to renew my passport before travelling.",
    "The children play in the park after school.",
    "I've lost the car keys again.",
    "The film starts at half past nine.",
    "How much is a return ticket to London?",
    "The doctor told me to walk every day.",
    "We moved into a bigger flat last month.",
    "The library is closed on Sunday afternoons.",
    "Thanks for your help, I don't know what I would have done without you.",
    "The team won the match in the last minute.",
    "The rubbish has to go out before ten.",
    "My grandmother makes the best apple pie in the world.",
    "The train arrived twenty minutes late.",
    "I'd like to book a table for four people.",
    "This summer we want to go to the beach with our friends.",
]
# Short texts (under 20 characters): what a person types to try the page.
SHORT_SPANISH = ["buenos días", "¿qué tal?", "muchas gracias", "hasta mañana", "la casa roja"]
SHORT_ENGLISH = ["good morning", "how are you?", "thank you", "see you tomorrow", "the red house"]


@pytest.fixture(scope="module")
def detector():
    return LanguageDetector(["es", "en"])


def test_everyday_sentences_and_short_phrases_are_detected(detector):
    for texts, language in [
        (SPANISH + SHORT_SPANISH, "es"),
        (ENGLISH + SHORT_ENGLISH, "en"),
    ]:
        wrong = [text for text in texts if detector.detect(text)[0][0] != language]
        assert wrong == [], wrong
    candidates = detector.detect(SPANISH[0])
    assert [code for code, _ in candidates] == ["es", "en"]
    assert candidates[0][1] > 90 and abs(sum(value for _, value in candidates) - 100) < 0.2
    # A list of lines detects as well as each: a paragraph of both languages leans to the
    # longer part.
    assert detector.detect("\n".join(SPANISH[:3] + ENGLISH[:1]))[0][0] == "es"


def test_candidates_are_the_languages_given_with_their_codes_as_given():
    detector = LanguageDetector(["en", "pt-BR", "zh-Hans", "fr"])
    candidates = detector.detect("Eu não sei onde fica a biblioteca da cidade.")
    assert candidates[0][0] == "pt-BR" and {code for code, _ in candidates} == set(
        detector.languages
    )
    assert detector.detect("我不知道图书馆在哪里。")[0][0] == "zh-Hans"
    # Restricted: a German sentence is one of the languages given (never "de").
    german = detector.detect("Ich weiß nicht, wo die Bibliothek ist.")
    assert [code for code, _ in german] != [] and "de" not in dict(german)
    values = [value for _, value in candidates]
    assert values == sorted(values, reverse=True)
    # Two codes of one language share its confidence, in the order given.
    both = LanguageDetector(["pt", "es", "pt-BR"]).detect("Eu não sei onde fica a biblioteca.")
    assert [code for code, _ in both][:2] == ["pt", "pt-BR"] and both[0][1] == both[1][1]
    assert iso_code("zt") == "zh" and iso_code("pt_BR") == "pt" and iso_code("EN") == "en"


def test_among_ranks_a_subset_scaled_to_100():
    detector = LanguageDetector(["es", "en", "pt"])
    text = "Eu não sei onde fica a biblioteca da cidade."
    assert detector.detect(text)[0][0] == "pt"
    among = detector.detect(text, among=["en", "es"])
    assert among[0][0] == "es" and abs(sum(value for _, value in among) - 100) < 0.2
    assert detector.detect(text, among=["en"]) == [("en", 100.0)]
    with pytest.raises(ValueError, match=r"`among` must hold some of the codes.*among=\['de'\]"):
        detector.detect(text, among=["de"])


def test_a_text_without_letters_ranks_all_at_zero_in_order(detector):
    assert detector.detect("1234 5678") == [("es", 0.0), ("en", 0.0)]


def test_one_language_is_returned_without_the_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "lingua", None)  # Any `import lingua` now fails.
    for codes in (["es"], ["xx-custom"], ["zh-Hans", "zh-Hant"]):
        detector = LanguageDetector(codes)
        assert detector.detect("Where is the library?") == [(code, 100.0) for code in codes]
    with pytest.raises(ImportError):
        LanguageDetector(["es", "en"])


def test_unknown_codes_and_bad_arguments_are_refused():
    with pytest.raises(ValueError) as error:
        LanguageDetector(["es", "xx", "en"])
    message = str(error.value)
    assert "does not know 'xx'" in message and "languages=['es', 'xx', 'en']" in message
    assert ", ".join(library_languages()) in message and "es, et, eu" in message
    for languages, fragment in [
        ("es", "must be a list of language codes. Received: languages='es'"),
        ([], "at least one non-empty language code. Received: languages=[]"),
        (["es", ""], "at least one non-empty language code"),
        (["es", "es"], "holds a code twice. Received: languages=['es', 'es']"),
    ]:
        with pytest.raises(ValueError, match=re.escape(fragment)):
            LanguageDetector(languages)
    detector = LanguageDetector(["es"])
    for text in ("", "  \n\t", None, 12):
        with pytest.raises(ValueError, match="`text` must be a string.*" + re.escape(repr(text))):
            detector.detect(text)
