"""The config document as pydantic models: every field's type, bounds and default in one place.

The models check the shape of a document after ``${ENV}`` interpolation (so a value from a
variable is converted like one written in the file: ``"3"`` to 3, ``"false"`` to False); what
needs several sections or Spark SQL is checked afterwards by :mod:`app.config.parse`. :func:`.document.json_schema`
exports the same models for editors and for the Helm chart's ``values.schema.json``.

One module per section: :mod:`.fields` (the field types every section shares), :mod:`.kafka`,
:mod:`.spark`, :mod:`.service` (``http:``, ``service:``, ``audit:``), :mod:`.cassandra`, :mod:`.pipeline`
and :mod:`.document` (the whole document and its JSON Schemas).
"""
