from tests.schemaregistry.fixtures import registry_server, schema_registry  # noqa: F401  (fixtures)
