package harness

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// notes are the causes of one table's verdicts, each written once under
// the table and referred to by number from the rows. A cause is the same
// note on both legs ("flush before leg a refused" and "... leg b ...":
// "legs a and b") and, in the compact table, on every row whatever its
// figures ("leg b reused 1406 of 1407" and "... 11381 of 11382"): the note
// then gives the first row's figures and says so. The wide table keeps a
// note per distinct set of figures.
type notes struct {
	list  []*note
	byKey map[string]*note
}

// note is one cause and where it was found.
type note struct {
	level Level
	// first is the text of its first instance, ctx the context it was found
	// at.
	first string
	ctx   int
	// legs are the legs it was found on ("a", "b"); otherFigures is set
	// when an instance had other figures than the first.
	legs         []string
	otherFigures bool
}

var (
	figureRE = regexp.MustCompile(`[-+]?\d+(?:[.,]\d+)*%?`)
	legRE    = regexp.MustCompile(`\bleg ([ab])\b`)
)

// noteKey identifies a cause across legs and, unless wide, across figures.
func noteKey(c Cause, wide bool) string {
	text := legRE.ReplaceAllString(c.Text, "leg ?")
	if !wide {
		text = figureRE.ReplaceAllString(text, "#")
	}
	return c.Level.String() + "\x00" + text
}

// refs records a row's causes, numbering the new ones in the verdict's
// order (the worst first), and returns their numbers, "[1,3]"; "" for a
// verdict without causes.
func (ns *notes) refs(v Verdict, ctx int, wide bool) string {
	if ns.byKey == nil {
		ns.byKey = map[string]*note{}
	}
	var nums []int
	for l := Poisoned; l >= OK; l-- {
		for _, c := range v.Causes {
			if c.Level != l {
				continue
			}
			key := noteKey(c, wide)
			n := ns.byKey[key]
			if n == nil {
				n = &note{level: c.Level, first: c.Text, ctx: ctx}
				ns.byKey[key] = n
				ns.list = append(ns.list, n)
			}
			if m := legRE.FindStringSubmatch(c.Text); m != nil && !slices.Contains(n.legs, m[1]) {
				n.legs = append(n.legs, m[1])
			}
			if legRE.ReplaceAllString(c.Text, "leg ?") != legRE.ReplaceAllString(n.first, "leg ?") {
				n.otherFigures = true
			}
			num := slices.Index(ns.list, n) + 1
			if !slices.Contains(nums, num) {
				nums = append(nums, num)
			}
		}
	}
	if len(nums) == 0 {
		return ""
	}
	slices.Sort(nums)
	refs := make([]string, len(nums))
	for i, n := range nums {
		refs[i] = strconv.Itoa(n)
	}
	return "[" + strings.Join(refs, ",") + "]"
}

// text is the note as written under the table.
func (n *note) text(wide bool) string {
	t := n.first
	if len(n.legs) == 2 {
		t = legRE.ReplaceAllLiteralString(t, "legs a and b")
	}
	if n.otherFigures && !wide {
		t += fmt.Sprintf(" (these figures are ctx %d's; --wide gives each row's)", n.ctx)
	}
	if n.level != OK {
		t = n.level.String() + ": " + t
	}
	return t
}

// noteWidth is where notes wrap: a cause can run to hundreds of
// characters (a server's refusal, the flag that would fix it).
const noteWidth = 100

// wrapNote writes text after label, wrapped at width, the following lines
// indented under the text.
func wrapNote(label, text string, width int) string {
	return wrapText(" "+label, strings.Repeat(" ", len(label)+1), text, width)
}

// causeWidth is where an audited request's causes wrap: a terminal's 80
// columns.
const causeWidth = 80

// wrapText writes text wrapped at width, after first on its first line
// and after indent on the others.
func wrapText(first, indent, text string, width int) string {
	var sb strings.Builder
	sb.WriteString(first)
	col := len(first)
	for i, word := range strings.Fields(text) {
		if i > 0 && col+1+len(word) > width {
			sb.WriteString("\n" + indent)
			col = len(indent)
		} else if i > 0 {
			sb.WriteString(" ")
			col++
		}
		sb.WriteString(word)
		col += len(word)
	}
	sb.WriteString("\n")
	return sb.String()
}
