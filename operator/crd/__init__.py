"""The CRD, generated: pydantic models → structural OpenAPI v3 schema → CustomResourceDefinition."""
