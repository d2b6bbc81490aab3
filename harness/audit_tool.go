package harness

import "strings"

// ToolComparison is a load tool's own figures against the truth.
type ToolComparison struct{}

func (t *ToolComparison) write(b *strings.Builder) {}
