// Package kafkago holds tinymq's franz-go conformance checks (see conformance_test.go); this
// file only names the modules whose test suites scripts/kafka-conformance-go.sh runs, so
// go.mod keeps them pinned.
package kafkago

import (
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kgo"
)
