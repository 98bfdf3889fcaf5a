import json


def parse(text):
    try:
        return json.loads(text)
    except ValueError:
        return {}["fallback"]


parse("{not json")
