"""Where each wire's answer puts its fields, and one lenient reader of any answer: token ids, text, finish reason,
usage, logprobs, tool calls and draft counts of OpenAI completions and chat answers (and their stream events),
SGLang's /generate and llama.cpp's /completion.

Why one module: the route adapters read answers strictly (a malformed field is a finding) and the repro and
replay scripts read them leniently (they resend a request and compare what comes back), but both must look in
the same places. The adapters and flavours import the field readers below (ID_FIELDS, LLAMA_CPP_FINISH,
sglang_finish, llama_cpp_stream_end, llama_cpp_drafts); the scripts carry this file verbatim and read with
answer() and fold(). So: standard library only, no `from __future__`, no import of the suite.
Environment: none.
"""
import json

ID_FIELDS = ("token_ids", "output_ids", "tokens")   # vLLM return_token_ids, SGLang /generate, llama.cpp return_tokens
LLAMA_CPP_FINISH = {"eos": "stop", "word": "stop", "limit": "length"}   # llama.cpp stop_type -> finish_reason
DONE = "[DONE]"   # the data of an OpenAI stream's last event


def sglang_finish(value):
    """SGLang's meta_info.finish_reason, {"type": "stop"|"length"|"abort", ...} or a bare string; else None."""
    if isinstance(value, dict):
        value = value.get("type")
    return value if isinstance(value, str) else None


def llama_cpp_stream_end(event):
    """llama.cpp's /completion stream ends with an event whose `stop` is true, not with [DONE]."""
    return event.get("stop") is True


def llama_cpp_drafts(body):
    """(draft_n, draft_n_accepted) of an answer's `timings`, as written (llama.cpp leaves both out when nothing
    was drafted); None when the answer has no timings."""
    timings = body.get("timings") if isinstance(body, dict) else None
    if not isinstance(timings, dict):
        return None
    return timings.get("draft_n"), timings.get("draft_n_accepted")


def native_finish(body):
    """The finish reason of a native answer: SGLang's meta_info, llama.cpp's stop_type; None for neither."""
    meta = body.get("meta_info") or {}
    if "finish_reason" in meta:
        return sglang_finish(meta["finish_reason"])
    return LLAMA_CPP_FINISH.get(body.get("stop_type"))


def _logprobs(choice, body):
    lp = choice.get("logprobs")
    if isinstance(lp, dict) and isinstance(lp.get("token_logprobs"), list):
        return [float(x) if x is not None else None for x in lp["token_logprobs"]]
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        return [e.get("logprob") for e in lp["content"]]
    if isinstance(body.get("completion_probabilities"), list):      # llama.cpp /completion
        return [e.get("logprob") for e in body["completion_probabilities"]]
    meta = body.get("meta_info") or {}
    if isinstance(meta.get("output_token_logprobs"), list):        # SGLang: [logprob, id, text]
        return [e[0] for e in meta["output_token_logprobs"]]
    return None


def _ids(choice, body):
    """The first list of ids in the choice, then in the body (as the server wrote them: an id that is not an int
    is its bug)."""
    for place in (choice, body):
        for key in ID_FIELDS:
            if isinstance(place.get(key), list):
                return list(place[key])
    return None


def _choice(choice, body):
    message = choice.get("message") or choice.get("delta") or {}
    text = choice.get("text", message.get("content", choice.get("content", body.get("text", body.get("content")))))
    return {"ids": _ids(choice, body), "text": text or "",
            "finish": choice.get("finish_reason") or native_finish(body), "logprobs": _logprobs(choice, body),
            "reasoning": message.get("reasoning_content", message.get("reasoning")) or "",
            "tool_calls": _calls(message.get("tool_calls"))}


def _calls(calls):
    """A chat message's (or stream delta's) tool calls as [index, name, arguments text] pieces."""
    out = []
    for n, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function") or {}
        out.append([call.get("index", n), function.get("name") or "", function.get("arguments") or ""])
    return out


def _joined_calls(pieces):
    """Tool calls from their pieces (a stream sends a call's name once and its arguments in deltas), each as
    [name, arguments parsed as JSON where they parse]."""
    calls = {}
    for index, name, arguments in pieces:
        call = calls.setdefault(index, ["", ""])
        call[0] += name
        call[1] += arguments
    return [[name, _json_or_text(arguments)] for _, (name, arguments) in sorted(calls.items())]


def _json_or_text(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def answer(body):
    """{ids, text, finish, usage, logprobs, choices, reasoning, tool_calls, drafted, accepted, cached, prompt} of an
    OpenAI completion or chat answer, SGLang's /generate or llama.cpp's /completion answer (ids None when the server
    returns none; drafted, accepted, cached and prompt None where it does not say)."""
    if isinstance(body, list):
        body = body[0] if body else {}
    choices = body.get("choices")
    parsed = [_choice(c, body) for c in choices] if isinstance(choices, list) and choices else [_choice(body, body)]
    usage = (body.get("usage") or {}).get("completion_tokens")
    if usage is None:
        usage = (body.get("meta_info") or {}).get("completion_tokens", body.get("tokens_predicted"))
    return {**parsed[0], "usage": usage, "tool_calls": _joined_calls(parsed[0]["tool_calls"]), "drafted": _drafted(body),
            "accepted": _accepted(body), **_prompt_cache(body),
            "choices": [p["ids"] if p["ids"] is not None else p["text"] for p in parsed]}


def _drafted(body):
    """Tokens drafted for this answer where the server says (llama.cpp's timings.draft_n; SGLang's meta_info
    spec_verify_ct), None where it does not say."""
    drafts = llama_cpp_drafts(body)
    if drafts is not None:
        return int(drafts[0] or 0)
    meta = body.get("meta_info") or {}
    return int(meta["spec_verify_ct"]) if isinstance(meta.get("spec_verify_ct"), (int, float)) else None


def _accepted(body):
    """Drafted tokens accepted for this answer where the server says (llama.cpp's timings.draft_n_accepted)."""
    drafts = llama_cpp_drafts(body)
    return None if drafts is None else int(drafts[1] or 0)


def _number(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _prompt_cache(body):
    """{cached, prompt}: the answer's prompt tokens taken from the server's cache and its prompt tokens, where it
    says (usage.prompt_tokens and prompt_tokens_details.cached_tokens; llama.cpp's timings.cache_n and
    tokens_evaluated; SGLang's meta_info)."""
    usage, timings, meta = (body.get(k) if isinstance(body.get(k), dict) else {} for k in ("usage", "timings",
                                                                                          "meta_info"))
    details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
    cached = next((v for v in (_number(details.get("cached_tokens")), _number(timings.get("cache_n")),
                               _number(meta.get("cached_tokens"))) if v is not None), None)
    prompt = next((v for v in (_number(usage.get("prompt_tokens")), _number(body.get("tokens_evaluated")),
                               _number(meta.get("prompt_tokens"))) if v is not None), None)
    return {"cached": cached, "prompt": prompt}


def fold(events):
    """A stream's events as one answer: text and ids concatenated, the last finish_reason and usage."""
    ids, text, finish, usage, lps = [], "", None, None, []
    has_ids, reasoning, calls = False, "", []
    for event in events:
        part = answer(event)
        if not (event.get("choices") or "content" in event or "text" in event):
            usage = part["usage"] if part["usage"] is not None else usage
            continue
        text += part["text"]
        reasoning += part["reasoning"]
        choice = (event.get("choices") or [{}])[0]
        calls += _calls((choice.get("delta") or choice.get("message") or {}).get("tool_calls"))
        if part["ids"] is not None:
            has_ids = True
            ids += part["ids"]
        lps += part["logprobs"] or []
        finish = part["finish"] or finish
        usage = part["usage"] if part["usage"] is not None else usage
    return {"ids": ids if has_ids else None, "text": text, "finish": finish, "usage": usage,
            "logprobs": lps or None, "choices": [ids if has_ids else text], "events": len(events),
            "reasoning": reasoning, "tool_calls": _joined_calls(calls)}
