"""The HTTP API of `keras-transformer serve` in process (Starlette's test client) over a fake
engine: LibreTranslate's request and response shapes, each error with its status code, keys
and rates, limits, language detection (`/detect`, `source: "auto"`), health, metrics, the
OpenAPI description and the access log."""

import json
import logging
import threading

import pytest
from starlette.testclient import TestClient

from keras_transformer.serving import ApiKeys, ServedModel, ServerState, Settings, create_app
from keras_transformer.serving.app import ROUTES
from keras_transformer.serving.limits import RateLimiter
from keras_transformer.serving.models import ModelSpec, check_specs, parse_model_spec
from keras_transformer.serving.requests import ApiError, parse_translate
from keras_transformer.translation import Capabilities, EngineBase, Translation

pytestmark = pytest.mark.one_backend


class FakeEngine(EngineBase):
    """Upper-cases each sentence; hypothesis k of an n-best list ends with `#k`; a sentence
    longer than 20 characters is `truncated`."""

    beam_size = 4
    alpha = 0.6
    max_source_length = max_source_pieces = None
    capabilities = Capabilities(alignments=False)  # It does not align.

    def __init__(self, gate=None):
        self.calls = []
        self.gate = gate

    def translate(self, sentences, num_hypotheses=None, target_prefix=None, beam_size=None):
        if self.gate is not None:
            self.gate.wait(10)
        self.calls.append(list(sentences))
        prefixes = target_prefix or [""] * len(sentences)
        results = []
        for sentence, prefix in zip(sentences, prefixes, strict=True):
            hypotheses = [
                Translation(
                    text=prefix + sentence.upper() + (f" #{rank}" if rank else ""),
                    score=-1.0 - rank,
                    tokens=[],
                    truncated=len(sentence) > 20,
                    source_tokens=[],
                    target_tokens=[],
                )
                for rank in range(num_hypotheses or 1)
            ]
            if not sentence:
                hypotheses = hypotheses[:1]
            results.append(hypotheses if num_hypotheses else hypotheses[0])
        return results


def make_state(specs=("es:en=fake",), status="ready", gate=None, **settings):
    models = []
    for text in specs:
        model = ServedModel(parse_model_spec(text))
        model.engine, model.directory = FakeEngine(gate), model.spec.path
        models.append(model)
    state = ServerState(models, Settings(**settings))
    state.set_status(status)
    return state


@pytest.fixture
def client():
    state = make_state()
    with TestClient(create_app(state)) as client:
        yield client
    state.close(5)


def post(client, body, **kwargs):
    return client.post("/translate", json=body, **kwargs)


def test_json_and_form_bodies_answer_as_libretranslate(client):
    answer = post(client, {"q": "hola", "source": "es", "target": "en"})
    assert answer.status_code == 200 and answer.json() == {"translatedText": "HOLA"}
    answer = post(client, {"q": ["uno", "dos\ntres"], "source": "es", "target": "en"})
    assert answer.json() == {"translatedText": ["UNO", "DOS\nTRES"]}
    # What LibreTranslate's clients send: a form, `q` repeated for a list.
    form = client.post("/translate", data={"q": "hola", "source": "es", "target": "en"})
    assert form.json() == {"translatedText": "HOLA"}
    form = client.post(
        "/translate",
        content="q=uno&q=dos&source=es&target=en&alternatives=1",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert form.json() == {
        "translatedText": ["UNO", "DOS"],
        "alternatives": [["UNO #1"], ["DOS #1"]],
    }
    multipart = client.post(
        "/translate",
        data={"q": "hola", "source": "es", "target": "en"},
        files={"x": ("a.txt", b"data")},
    )
    assert multipart.status_code == 400 and "files are not accepted" in multipart.json()["error"]


def test_alternatives_scores_prefix_truncation_and_auto(client):
    body = {"q": "hola\nadiós", "source": "auto", "target": "en", "alternatives": 2, "scores": True}
    assert post(client, body).json() == {
        "translatedText": "HOLA\nADIÓS",
        "alternatives": ["HOLA #1\nADIÓS #1", "HOLA #2\nADIÓS #2"],
        "scores": -2.0,
        "alternativeScores": [-4.0, -6.0],
        # The only source into English: no detection needed.
        "detectedLanguage": {"language": "es", "confidence": 100.0},
    }
    answer = post(
        client, {"q": ["a", ""], "source": "es", "target": "en", "target_prefix": ["x ", "y "]}
    )
    # An empty text has no sentence to continue: "" (as a real engine answers it).
    assert answer.json() == {"translatedText": ["x A", ""]}
    long = "una frase bastante larga"  # The fake engine truncates above 20 characters.
    answer = post(client, {"q": [long, "corta"], "source": "es", "target": "en"})
    assert answer.json() == {"translatedText": ["UNA FRASE BASTANTE LARGA", "CORTA"]}
    body = {"q": [long, "corta"], "source": "es", "target": "en", "segment": False}
    assert post(client, body).json()["truncated"] == [True, False]  # Each line whole.


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"source": "es", "target": "en"}, 400, "missing q parameter"),
        ({"q": "x", "target": "en"}, 400, "missing source parameter"),
        ({"q": "x", "source": "es"}, 400, "missing target parameter"),
        (
            {"q": 5, "source": "es", "target": "en"},
            400,
            "q must be a string or a list of strings. Received: 5",
        ),
        ({"q": [], "source": "es", "target": "en"}, 400, "at least one text"),
        ({"q": "x", "source": "es", "target": "en", "format": "xml"}, 400, "Received: 'xml'"),
        (
            {"q": "x", "source": "es", "target": "en", "format": "html", "alternatives": 1},
            400,
            "no alternatives or target_prefix. Received: alternatives=1",
        ),
        (
            {"q": "x", "source": "es", "target": "en", "alternatives": "two"},
            400,
            "alternatives must be a number",
        ),
        ({"q": "x", "source": "es", "target": "en", "alternatives": -1}, 400, ">= 0. Received: -1"),
        ({"q": "x", "source": "es", "target": "en", "alternatives": 4}, 400, "num_hypotheses"),
        (
            {"q": "x", "source": "es", "target": "en", "beam_size": 1.5},
            400,
            "beam_size must be an integer",
        ),
        ({"q": "x", "source": "es", "target": "en", "sampling_topp": "nan"}, 400, "finite number"),
        # Numbers past any float: a 400 naming the field, the value shortened (a 500 with a
        # logged OverflowError before).
        (
            {"q": "x", "source": "es", "target": "en", "beam_size": 10**400},
            400,
            "beam_size must be at most 2147483647 in size. Received: '1000000000000000",
        ),
        (
            {"q": "x", "source": "es", "target": "en", "sampling_topp": 10**400},
            400,
            "sampling_topp must be at most 2147483647 in size",
        ),
        ({"q": "x", "source": "es", "target": "en", "seed": 1e300}, 400, "seed must be at most"),
        ({"q": "x", "source": "es", "target": "en", "sampling_topp": "1e400"}, 400, "finite"),
        (
            {"q": "x", "source": "es", "target": "en", "beam_size": 5},
            400,
            "beam_size must be one of 4 on this server",
        ),
        (
            {"q": "x", "source": "es", "target": "en", "sampling_temperature": 0.5},
            400,
            "sampling (sampling_topk, sampling_topp, sampling_temperature) is off",
        ),
        (
            {"q": ["x"], "source": "es", "target": "en", "target_prefix": "p"},
            400,
            "1 prefixes for 1 texts",
        ),
        (
            {"q": "x", "source": "en", "target": "es"},
            400,
            "en:es is not supported (this server translates es:en)",
        ),
        (
            {"q": "x" * 5001, "source": "es", "target": "en"},
            413,
            "request (5001) exceeds text limit (5000",
        ),
        (
            {"q": ["x"] * 65, "source": "es", "target": "en"},
            400,
            "request (65) exceeds text limit (64)",
        ),
        ([1, 2], 400, "the body must be a JSON object"),
    ],
)
def test_bad_requests_get_their_status_and_a_message_naming_the_field(
    client, body, status, message
):
    answer = post(client, body)
    assert answer.status_code == status, answer.text
    assert message in answer.json()["error"]


def test_invalid_json_oversized_bodies_and_unknown_routes(client):
    answer = client.post(
        "/translate", content=b'{"q": ', headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 400 and "not valid JSON" in answer.json()["error"]
    deep = b"[" * 100_000 + b"]" * 100_000
    answer = client.post("/translate", content=deep, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and "nested too deeply" in answer.json()["error"]
    big = b"x" * (1 << 20 | 1)
    answer = client.post("/translate", content=big, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413 and "at most 1048576 bytes" in answer.json()["error"]

    def chunks():  # No Content-Length: counted while it is received.
        for _ in range(40):
            yield b"x" * 65536

    answer = client.post(
        "/translate", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 413
    assert client.get("/translate").status_code == 405
    assert client.get("/nothing").json() == {"error": "Not found: /nothing"}
    assert post(client, {"q": "hola", "source": "es", "target": "en"}).status_code == 200


def test_keys_and_rates(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# key  per minute\nalpha-key 2\nbeta-key\n", encoding="utf-8")
    state = make_state(api_keys=ApiKeys.from_file(keys), req_limit=3)
    body = {"q": "x", "source": "es", "target": "en"}
    with TestClient(create_app(state)) as client:
        assert post(client, body).status_code == 403
        assert post(client, {**body, "api_key": "wrong"}).json() == {"error": "Invalid API key"}
        statuses = [post(client, {**body, "api_key": "alpha-key"}).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        statuses = [post(client, {**body, "api_key": "beta-key"}).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]  # The server's --req-limit.
        limited = post(client, {**body, "api_key": "beta-key"})
        assert (
            limited.headers["retry-after"] == "60" and "3 per 1 minute" in limited.json()["error"]
        )
        assert client.get("/frontend/settings").json()["keyRequired"] is True
    state.close(5)


@pytest.mark.parametrize(
    "text, message",
    [
        ("a b c\n", "line 1: expected `KEY [REQUESTS_PER_MINUTE]`, got 3 fields"),
        ("a -1\n", "line 1: the requests per minute must be an int >= 0. Received: '-1'"),
        ("a\nb\na\n", "line 3: this key was given before"),
        ("# nothing\n", "no API key in the file"),
    ],
)
def test_key_file_errors_name_the_line(tmp_path, text, message):
    path = tmp_path / "keys"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        ApiKeys.from_file(path)


def test_rate_limiter_window_slides_and_forgets_old_clients(monkeypatch):
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    assert [limiter.allow("a", 2) for _ in range(3)] == [True, True, False]
    now[0] = 59.0
    assert not limiter.allow("a", 2)
    now[0] = 60.5  # The first two requests left the window.
    assert limiter.allow("a", 2) and limiter.allow("a", 2) and not limiter.allow("a", 2)
    assert all(limiter.allow("b", 0) for _ in range(100))  # 0: no limit.
    monkeypatch.setattr("keras_transformer.serving.limits.MAX_TRACKED_CLIENTS", 10)
    for client in range(50):
        limiter.allow(f"client {client}", 1)
    assert len(limiter._seen) == 10


def test_overload_time_limit_warming_and_draining_answer_503():
    gate = threading.Event()
    state = make_state(gate=gate, max_queue_sentences=3, timeout=0.5)
    body = {"q": "x", "source": "es", "target": "en"}
    with TestClient(create_app(state)) as client:
        answer = post(client, body)  # The engine is held: the request times out.
        assert (
            answer.status_code == 503
            and "Timed out: no translation within 0.5 s" in answer.json()["error"]
        )
        post(client, {**body, "q": ["a", "b"]})  # Waits behind the held batch, then times out.
        answer = post(client, {**body, "q": ["c", "d"]})
        assert (
            answer.status_code == 503 and "Overloaded: the queue is full" in answer.json()["error"]
        )
        gate.set()
        for status in ("warming", "draining"):
            state.set_status(status)
            answer = post(client, body)
            assert answer.status_code == 503 and status in answer.json()["error"]
            assert client.get("/health").status_code == 503
            assert client.get("/health/live").status_code == 200
        state.set_status("ready")
        assert client.get("/health/ready").json()["status"] == "ready"
    state.close(5)


def test_several_pairs_languages_and_auto():
    state = make_state(specs=("es:en=a", "en:es=b", "de:en=c"))
    with TestClient(create_app(state)) as client:
        assert client.get("/languages").json() == [
            {"code": "de", "name": "German", "targets": ["en"]},
            {"code": "en", "name": "English", "targets": ["es"]},
            {"code": "es", "name": "Spanish", "targets": ["en"]},
        ]
        answer = post(client, {"q": "x", "source": "auto", "target": "es"})
        assert answer.json()["detectedLanguage"] == {"language": "en", "confidence": 100.0}
        # Two sources into English: detected among them (never English, which has no model
        # into English), the text goes to that model.
        spanish = "¿Dónde está la estación de tren más cercana?"
        answer = post(client, {"q": spanish, "source": "auto", "target": "en"}).json()
        assert answer["translatedText"] == spanish.upper()
        assert answer["detectedLanguage"]["language"] == "es"
        assert answer["detectedLanguage"]["confidence"] > 90
        german = ["Wo ist der nächste Bahnhof?", "Ich habe meine Schlüssel verloren."]
        answer = post(client, {"q": german, "source": "auto", "target": "en"}).json()
        assert answer["detectedLanguage"]["language"] == "de"
        english = "Where is the nearest train station?"  # Detected among es and de only.
        answer = post(client, {"q": english, "source": "auto", "target": "en"}).json()
        chosen = answer["detectedLanguage"]["language"]
        assert chosen in ("es", "de")
        answer = post(client, {"q": "x", "source": "auto", "target": "fr"})
        assert answer.status_code == 400 and "auto:fr is not supported" in answer.json()["error"]
    # Each model's first batch (the fake engine truncates above 20 characters: the pieces of
    # the long sentences follow in later batches).
    assert [model.engine.calls[0] for model in state.models] == [[spanish], ["x"], german]
    assert ([english] in state.models[0].engine.calls) == (chosen == "es")
    state.close(5)


def test_detect_answers_the_served_sources_best_first():
    state = make_state(specs=("es:en=a", "en:es=b", "de:en=c"))
    with TestClient(create_app(state)) as client:
        answer = client.post("/detect", json={"q": "Mañana vamos a visitar a mis abuelos."})
        candidates = answer.json()
        assert answer.status_code == 200 and [c["language"] for c in candidates][0] == "es"
        assert {c["language"] for c in candidates} == {"de", "en", "es"}
        confidences = [c["confidence"] for c in candidates]
        assert confidences == sorted(confidences, reverse=True) and confidences[0] > 90
        assert abs(sum(confidences) - 100) < 0.5
        # LibreTranslate's clients send a form; a list of texts is detected as one text.
        form = client.post("/detect", data={"q": "The meeting has been postponed."})
        assert form.json()[0]["language"] == "en"
        lines = client.post("/detect", json={"q": ["Guten Morgen", "Wie geht es dir heute?"]})
        assert lines.json()[0]["language"] == "de"
        for body, message in [
            ({}, "missing q parameter"),
            ({"q": " \n "}, "q must hold a text that is not blank. Received: [' \\n ']"),
            ({"q": 5}, "q must be a string or a list of strings. Received: 5"),
            ({"q": "hola", "api_key": 7}, "api_key must be a string. Received: 7"),
        ]:
            answer = client.post("/detect", json=body)
            assert answer.status_code == 400 and message in answer.json()["error"], answer.json()
        assert client.get("/detect").status_code == 405
        settings = client.get("/frontend/settings").json()
        assert settings["languageDetection"] is True
    assert all(model.engine.calls == [] for model in state.models)  # No engine detects.
    state.close(5)


def test_detect_follows_the_keys_rates_and_character_limit(tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("alpha-key 2\n", encoding="utf-8")
    state = make_state(api_keys=ApiKeys.from_file(keys), char_limit=20)
    with TestClient(create_app(state)) as client:
        body = {"q": "hola, ¿qué tal?"}
        assert client.post("/detect", json=body).status_code == 403
        wrong = client.post("/detect", json={**body, "api_key": "no"})
        assert wrong.json() == {"error": "Invalid API key"}
        long = client.post("/detect", json={"q": "a" * 21, "api_key": "alpha-key"})
        assert long.status_code == 413 and "(21) exceeds text limit (20" in long.json()["error"]
        assert client.post("/detect", json={**body, "api_key": "alpha-key"}).status_code == 200
        # The key's 2 requests per minute (the 413 was one), shared with /translate.
        translate = {**body, "source": "es", "target": "en", "api_key": "alpha-key"}
        assert post(client, translate).status_code == 429
        assert client.post("/detect", json={**body, "api_key": "alpha-key"}).status_code == 429
    state.close(5)


def test_detection_is_off_for_a_model_of_any_pair_or_an_unknown_source(caplog):
    state = make_state(specs=("fake",))
    with TestClient(create_app(state)) as client:
        answer = client.post("/detect", json={"q": "hola"})
        assert answer.status_code == 400 and answer.json() == {
            "error": "Language detection is not available: the model translates any pair, "
            "so its languages are unknown"
        }
        auto = post(client, {"q": "hola", "source": "auto", "target": "en"})
        assert auto.json() == {
            "translatedText": "HOLA",
            "detectedLanguage": {"language": "auto", "confidence": 0},
        }
        assert client.get("/frontend/settings").json()["languageDetection"] is False
    state.close(5)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.serving"):
        state = make_state(specs=("es:en=a", "xx:en=b"))
    assert "language detection is off: Language detection does not know 'xx'" in caplog.text
    with TestClient(create_app(state)) as client:
        answer = client.post("/detect", json={"q": "hola"})
        assert answer.status_code == 400 and "does not know 'xx'" in answer.json()["error"]
        auto = post(client, {"q": "hola", "source": "auto", "target": "en"})
        assert auto.status_code == 400 and "ambiguous" in auto.json()["error"]
        assert "language detection is off" in auto.json()["error"]
    state.close(5)


def test_a_model_of_any_pair_answers_any_codes():
    state = make_state(specs=("fake",))
    with TestClient(create_app(state)) as client:
        assert post(client, {"q": "x", "source": "fr", "target": "it"}).json() == {
            "translatedText": "X"
        }
        assert client.get("/frontend/settings").json()["anyPair"] is True
    state.close(5)


def test_metrics_openapi_page_and_access_log(client, caplog):
    with caplog.at_level(logging.INFO, logger="keras_transformer.serving.access"):
        post(client, {"q": ["a", "b"], "source": "es", "target": "en"})
        post(client, {"source": "es"})
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 2 and '"POST /translate" 200' in lines[0] and " 400 " in lines[1]
    metrics = client.get("/metrics").text
    assert 'keras_transformer_requests_total{route="/translate",status="200"} 1.0' in metrics
    assert 'keras_transformer_requests_total{route="/translate",status="400"} 1.0' in metrics
    assert 'keras_transformer_sentences_total{model="es:en"} 2.0' in metrics
    assert 'keras_transformer_batch_sentences_count{model="es:en"} 1.0' in metrics
    assert "keras_transformer_ready 1.0" in metrics
    document = client.get("/openapi.json").json()
    assert document["openapi"].startswith("3.") and set(document["paths"]) == set(ROUTES)
    app = client.app
    while not hasattr(app, "routes"):  # Through the middleware (access log, errors, body).
        app = app.app
    routed = {route.path for route in app.routes}
    assert routed == set(ROUTES)
    assert client.get("/spec").json() == document
    page = client.get("/")
    assert page.status_code == 200 and 'id="translate"' in page.text and "viewport" in page.text
    assert 'id="detected"' in page.text and "Detect language" in page.text


def test_model_arguments():
    assert parse_model_spec("es:en=runs/x") == ModelSpec("runs/x", "es", "en")
    assert parse_model_spec("pt-BR:zh-Hans=/a=b") == ModelSpec("/a=b", "pt-BR", "zh-Hans")
    assert parse_model_spec("hf://user/model") == ModelSpec("hf://user/model")
    assert parse_model_spec("C:/models=1") == ModelSpec("C:/models=1")  # No pair: a path.
    with pytest.raises(ValueError, match="source and target must differ"):
        parse_model_spec("en:en=x")
    with pytest.raises(ValueError, match="One model per language pair. Received twice: es:en"):
        check_specs([parse_model_spec("es:en=a"), parse_model_spec("es:en=b")])
    with pytest.raises(ValueError, match="'b' without a pair"):
        check_specs([parse_model_spec("es:en=a"), parse_model_spec("b")])


def test_parse_translate_reads_form_strings_as_types():
    parsed = parse_translate(
        {
            "q": "x",
            "source": "es",
            "target": "en",
            "alternatives": "2",
            "beam_size": "4",
            "sampling_topp": "0.9",
            "scores": "true",
            "seed": "7",
        }
    )
    assert parsed.alternatives == 2 and parsed.options.num_hypotheses == 3
    assert parsed.options.beam_size == 4 and parsed.options.sampling_topp == 0.9
    assert parsed.scores is True and parsed.options.seed == 7
    with pytest.raises(ApiError, match="scores must be true or false"):
        parse_translate({"q": "x", "source": "es", "target": "en", "scores": "maybe"})
    assert json.dumps(parsed.texts) == '["x"]'


def test_cross_origin_pages_only_from_the_origins_given():
    body = {"q": "x", "source": "es", "target": "en"}
    origin = {"Origin": "https://app.example"}
    state = make_state()
    with TestClient(create_app(state)) as client:
        assert "access-control-allow-origin" not in post(client, body, headers=origin).headers
    state.close(5)
    state = make_state(cors_origins=("https://app.example",))
    with TestClient(create_app(state)) as client:
        answer = post(client, body, headers=origin)
        assert answer.headers["access-control-allow-origin"] == "https://app.example"
        preflight = client.options(
            "/translate",
            headers={
                **origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
        assert preflight.status_code == 200
        other = post(client, body, headers={"Origin": "https://other.example"})
        assert "access-control-allow-origin" not in other.headers
    state.close(5)


def test_a_request_of_more_lines_than_the_queue_holds_is_413():
    state = make_state(max_queue_sentences=4)
    with TestClient(create_app(state)) as client:
        answer = post(client, {"q": "a\nb\nc\nd\ne", "source": "es", "target": "en"})
        assert (
            answer.status_code == 413
            and "5 sentences, more than the server queues (4)" in answer.json()["error"]
        )
    state.close(5)


def test_html_keeps_its_markup_and_translates_its_texts(client):
    from bs4 import BeautifulSoup

    markup = '<p>Hola <b>mundo</b>. <a href="/x?a=1&amp;b=2">Adiós</a></p><pre>no se toca</pre>'
    body = {"q": [markup, "<i>uno</i>"], "source": "es", "target": "en", "format": "html"}
    answer = post(client, body)
    assert answer.status_code == 200, answer.text
    first, second = answer.json()["translatedText"]
    soup = BeautifulSoup(first, "html.parser")
    assert [tag.name for tag in soup.find_all()] == ["p", "b", "a", "pre"]
    assert soup.a["href"] == "/x?a=1&b=2" and "&amp;" in first
    assert soup.p.get_text(" ", strip=True).split() == ["HOLA", "MUNDO.", "ADIÓS"]
    assert soup.pre.get_text() == "no se toca"  # Never translated.
    assert second == "<i>UNO</i>"
