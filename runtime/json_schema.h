// JSON schema -> Grammar (runtime/grammar.h): the sentences of the grammar are JSON texts
// that validate against the schema, written compactly or with bounded whitespace (one
// space, or a newline and up to 20 spaces, between tokens; none before the value or after
// it, so generation ends when the value closes).
//
// Supported: type (one or a list), object with properties / required /
// additionalProperties (absent or false: only the listed properties, in the listed order;
// without properties, true or a schema: any members), string with minLength / maxLength
// (code points) / enum / const, number, integer, boolean, null, array with items /
// minItems / maxItems, enum, const, anyOf, oneOf (exclusivity not enforced), allOf of one
// schema, $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion allowed), and the
// annotations (title, description, default, examples, $schema, $id, $comment). Any other
// keyword is an InvalidArgument naming it and where it is, never silently ignored. Numbers
// are limited to 16 integer digits, 16 fraction digits and 3 exponent digits.
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "runtime/grammar.h"

namespace mt {

// schema_json: the schema as JSON text.
StatusOr<std::shared_ptr<const Grammar>> json_schema_grammar(std::string_view schema_json);

// Any JSON object (response_format json_object).
std::shared_ptr<const Grammar> json_object_grammar();

}  // namespace mt
