// Package examples holds ready configuration files; Quickstart is the one
// `tokenlimit serve` runs when given no --config.
package examples

import _ "embed"

// Quickstart is examples/quickstart.yaml.
//
//go:embed quickstart.yaml
var Quickstart []byte
