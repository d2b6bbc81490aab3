package scenarios

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sglmock/sglmock/mockserver/profile"
)

// readProfile reads the profile key: a built-in profile's name, or a
// mapping of profile keys over a built-in one (base, "default" when
// absent), merged key by key so that `decode: {per_seq_s: 0.001}` changes
// that one coefficient. The inline profile is named after the scenario
// unless it names itself.
func (d *decoder) readProfile(n *yaml.Node, scenario string) (*profile.Profile, error) {
	if n.Kind == yaml.ScalarNode {
		// A scenario names built-ins only: a path would make it depend on
		// where it runs.
		b, err := profile.BuiltinYAML(n.Value)
		if err != nil {
			return nil, d.errorf(n, "profile", "%q is not a built-in profile (%s)", n.Value, builtinProfileNames())
		}
		return profile.Parse(strings.NewReader(string(b)), n.Value)
	}
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(n, "profile", "want a built-in profile's name or a mapping of profile keys, got %s", profile.NodeKind(n))
	}
	base := "default"
	var over yaml.Node
	over.Kind, over.Line = yaml.MappingNode, n.Line
	hasName := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "base":
			if v.Kind != yaml.ScalarNode {
				return nil, d.errorf(v, "profile.base", "want a built-in profile's name, got %s", profile.NodeKind(v))
			}
			base = v.Value
			continue
		case "name":
			hasName = true
		}
		over.Content = append(over.Content, k, v)
	}
	baseYAML, err := profile.BuiltinYAML(base)
	if err != nil {
		return nil, d.errorf(n, "profile.base", "%q is not a built-in profile (%s)", base, builtinProfileNames())
	}
	if err := profile.CheckKeys(&over); err != nil {
		var ke *profile.KeyError
		if !errors.As(err, &ke) {
			return nil, d.errorf(n, "profile", "%v", err)
		}
		field := "profile"
		if ke.Field != "" {
			field += "." + ke.Field
		}
		return nil, &FileError{File: d.file, Line: ke.Line, Field: field, Msg: ke.Msg}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(baseYAML, &doc); err != nil {
		return nil, err // a built-in always parses
	}
	merged := doc.Content[0]
	mergeMapping(merged, &over)
	if !hasName {
		mergeMapping(merged, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Value: "name"}, {Kind: yaml.ScalarNode, Value: scenario},
		}})
	}
	text, err := yaml.Marshal(merged)
	if err != nil {
		return nil, d.errorf(n, "profile", "%v", err)
	}
	p, err := profile.Parse(strings.NewReader(string(text)), scenario)
	if err != nil {
		var fe *profile.FieldError
		if errors.As(err, &fe) {
			at := nodeAt(&over, fe.Field)
			if at == nil {
				at = n
			}
			return nil, d.errorf(at, "profile."+fe.Field, "%v: %s (with the base %s)", fe.Value, fe.Why, base)
		}
		return nil, d.errorf(n, "profile", "%v", err)
	}
	return p, nil
}

func builtinProfileNames() string {
	var names []string
	for _, b := range profile.Builtins() {
		names = append(names, b.Name)
	}
	return "built-ins: " + strings.Join(names, ", ")
}

// mergeMapping sets every key of over into dst: mappings merge key by key,
// anything else replaces.
func mergeMapping(dst, over *yaml.Node) {
	for i := 0; i+1 < len(over.Content); i += 2 {
		k, v := over.Content[i], over.Content[i+1]
		found := false
		for j := 0; j+1 < len(dst.Content); j += 2 {
			if dst.Content[j].Value != k.Value {
				continue
			}
			found = true
			if cur := dst.Content[j+1]; cur.Kind == yaml.MappingNode && v.Kind == yaml.MappingNode {
				mergeMapping(cur, v)
			} else {
				dst.Content[j+1] = v
			}
		}
		if !found {
			dst.Content = append(dst.Content, k, v)
		}
	}
}

var pathPart = regexp.MustCompile(`^([a-z_0-9]+)(?:\[(\d+)\])?$`)

// nodeAt finds the node of a profile field path ("decode.ctx_table[1]")
// in an inline profile; nil when the inline profile does not set it.
func nodeAt(n *yaml.Node, path string) *yaml.Node {
	for part := range strings.SplitSeq(path, ".") {
		m := pathPart.FindStringSubmatch(part)
		if m == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == m[1] {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		if m[2] != "" {
			idx, _ := strconv.Atoi(m[2])
			if next.Kind != yaml.SequenceNode || idx >= len(next.Content) {
				return next
			}
			next = next.Content[idx]
		}
		n = next
	}
	return n
}
