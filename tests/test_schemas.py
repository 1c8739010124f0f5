"""The graph's JSON schemas, as LangGraph Studio reads them: input, output and a context of JSON fields only.
(`tests/test_servers.py` fetches them from `langgraph dev` and runs the graph from them.)"""

import json
from dataclasses import fields

from apdmem import Context, build_graph
from apdmem.graph.state import InputState, OutputState


def test_input_output_and_context_schemas():
    graph = build_graph()
    inputs, outputs, context = graph.get_input_jsonschema(), graph.get_output_jsonschema(), graph.get_context_jsonschema()
    assert set(inputs["properties"]) == set(InputState.__annotations__) == {"question", "question_date"}
    assert set(outputs["properties"]) == set(OutputState.__annotations__)
    assert set(outputs["$defs"]) == {"Evidence", "Drill"}
    # Only what a client can type in a form: strings, integers, booleans, each with its default and description.
    assert set(context["properties"]) == {f.name for f in fields(Context)}
    for name, schema in context["properties"].items():
        assert schema["type"] in ("string", "integer", "boolean") and "default" in schema and schema.get("description"), name
    json.dumps([inputs, outputs, context])
