# The chat template oracle: Python's jinja2 set up as transformers'
# apply_chat_template sets it up (utils/chat_template_utils.py:
# _compile_jinja_template), and SGLang's detection of a template's content
# format (parser/jinja_template_utils.py). Reads a JSON list of cases on
# standard input, each {"template", "context"}; writes a JSON list of
# {"text"} or {"error"}, with each template's "content_format".
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# strftime_now's date: sglmock renders every template at this date.
TEMPLATE_DATE = datetime(2024, 7, 26)


class AssistantTracker(Extension):
    # transformers' {% generation %} tag; it renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render", [])
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return TEMPLATE_DATE.strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def _is_var_access(node, varname):
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == varname


def _is_attr_access(node, varname, key):
    if isinstance(node, jinja2.nodes.Getitem):
        return (_is_var_access(node.node, varname) and isinstance(node.arg, jinja2.nodes.Const)
                and node.arg.value == key)
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var_access(node.node, varname) and node.attr == key
    return False


def _is_var_or_elems_access(node, varname, key=None):
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _is_var_or_elems_access(node.node, varname, key)
    return _is_attr_access(node, varname, key) if key else _is_var_access(node, varname)


def content_format(template):
    # SGLang's detect_jinja_template_content_format, as written there.
    if any(k in template for k in ["image", "audio", "video", "vision"]):
        return "openai"
    try:
        ast = environment().parse(template)
    except Exception:
        return "string"
    for loop in ast.find_all(jinja2.nodes.For):
        it = loop.iter
        if _is_var_or_elems_access(it, "message", "content"):
            return "openai"
        if _is_var_or_elems_access(it, "msg", "content") or _is_var_or_elems_access(it, "m", "content"):
            return "openai"
    return "string"


def main():
    env = environment()
    out = []
    for case in json.load(sys.stdin):
        result = {"content_format": content_format(case["template"])}
        try:
            result["text"] = env.from_string(case["template"]).render(**case.get("context", {}))
        except Exception as e:  # the template's error is the case's answer
            result["error"] = "%s: %s" % (type(e).__name__, e)
        out.append(result)
    json.dump(out, sys.stdout, ensure_ascii=False)


main()
