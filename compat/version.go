package compat

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Version is a parsed Python package version: the release numbers, then
// an optional pre-release (a, b, rc), post-release and development
// release; a local part (+g5fe238c43) is read and ignored.
type Version struct {
	release []int
	// pre is the pre-release phase (1 a, 2 b, 3 rc; 0 none) and its
	// number.
	pre, preN int
	// post is the post-release number plus one (0: none).
	post int
	// dev is the development release number plus one (0: none).
	dev  int
	text string
}

// ErrVersion is a version string that is no Python package version.
var ErrVersion = errors.New("not a version")

// ParseVersion reads a version as SGLang reports it: "0.5.18",
// "0.5.10.post1", "0.5.10.post2.dev2009+g5fe238c43", with or without a
// leading "v".
func ParseVersion(s string) (Version, error) {
	v := Version{text: s}
	t := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "v")
	t, _, _ = strings.Cut(t, "+")
	bad := fmt.Errorf("%q: %w", s, ErrVersion)
	var tags []string // what follows the release numbers: "rc1", "post2", "dev3"
	for _, p := range strings.Split(t, ".") {
		digits, rest := leadingDigits(p)
		switch {
		case digits != "" && len(tags) == 0:
			n, err := strconv.Atoi(digits)
			if err != nil {
				return Version{}, bad
			}
			v.release = append(v.release, n)
			if rest != "" {
				tags = append(tags, rest) // 0.5.18rc1
			}
		case digits == "" && p != "":
			tags = append(tags, p)
		default:
			return Version{}, bad
		}
	}
	if len(v.release) == 0 {
		return Version{}, bad
	}
	for _, p := range tags {
		var n int
		var ok bool
		switch {
		case strings.HasPrefix(p, "post"):
			n, ok = suffixNumber(p, "post")
			v.post = n + 1
		case strings.HasPrefix(p, "dev"):
			n, ok = suffixNumber(p, "dev")
			v.dev = n + 1
		case strings.HasPrefix(p, "rc"):
			v.preN, ok = suffixNumber(p, "rc")
			v.pre = 3
		case strings.HasPrefix(p, "a"):
			v.preN, ok = suffixNumber(p, "a")
			v.pre = 1
		case strings.HasPrefix(p, "b"):
			v.preN, ok = suffixNumber(p, "b")
			v.pre = 2
		}
		if !ok {
			return Version{}, bad
		}
	}
	return v, nil
}

// leadingDigits splits "18rc1" into "18" and "rc1".
func leadingDigits(s string) (digits, rest string) {
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	return s[:j], s[j:]
}

// suffixNumber reads the number after prefix in p ("post2" -> 2); a
// missing number is 0, as Python's packaging reads "post".
func suffixNumber(p, prefix string) (int, bool) {
	rest := strings.TrimPrefix(p, prefix)
	if rest == "" {
		return 0, true
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// String is the version as it was given.
func (v Version) String() string { return v.text }

// Compare orders versions as Python's packaging does: release numbers
// (missing ones count as 0), then a development release before its
// pre-releases before the release before its post-releases.
func (v Version) Compare(w Version) int {
	for i := range max(len(v.release), len(w.release)) {
		if c := cmp.Compare(at(v.release, i), at(w.release, i)); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(v.phase(), w.phase()); c != 0 {
		return c
	}
	if c := cmp.Compare(v.preN, w.preN); c != 0 {
		return c
	}
	if c := cmp.Compare(v.post, w.post); c != 0 {
		return c
	}
	// A development release comes before the release it leads to.
	return cmp.Compare(devRank(v.dev), devRank(w.dev))
}

// phase ranks a version within its release numbers: a bare development
// release (0.5.11.dev3) first, then a, b, rc, then the release itself.
func (v Version) phase() int {
	switch {
	case v.pre > 0:
		return v.pre
	case v.dev > 0 && v.post == 0:
		return 0
	}
	return 4
}

func devRank(dev int) int {
	if dev == 0 {
		return int(^uint(0) >> 1)
	}
	return dev
}

func at(s []int, i int) int {
	if i < len(s) {
		return s[i]
	}
	return 0
}

// sortedVersions parses and sorts version strings; it panics on a bad
// one, since only the package's own tables are passed.
func sortedVersions(texts []string) []Version {
	vs := make([]Version, len(texts))
	for i, t := range texts {
		v, err := ParseVersion(t)
		if err != nil {
			panic(err)
		}
		vs[i] = v
	}
	slices.SortFunc(vs, Version.Compare)
	return vs
}
