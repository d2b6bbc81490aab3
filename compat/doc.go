// Package compat names the SGLang releases whose behaviour sglmock follows
// and the rules in which they differ. A server chooses a release
// (sglmock serve --sglang-version, the profile key sglang_version) and
// reads its Rules: one named boolean per behaviour that changed between
// the releases the mock knows, true where the release follows the newer
// behaviour. The engine, the HTTP layer and the KV event publisher each
// read the fields they act on; the harness asks, of the version a real
// server reports, whether it has a rule (Has).
//
// # The table
//
// Each rule is one field of Rules and one row of Table: what SGLang did
// before and after, the pull requests that changed it, the SGLang
// function that carries it, and the first known release that has it
// (Since). A release has a rule when it is that release or a later one.
// Adding a rule is adding its field and its row; every known release then
// takes it by its number.
//
// # Releases
//
// Known lists the releases a server may be told to be. A release the list
// lacks is refused, with the list: between two known releases the mock
// cannot tell which of the rules that changed in between a release
// contains. Versions compare as Python packages do (PEP 440: 0.5.10 <
// 0.5.10.post1 < 0.5.11.dev3 < 0.5.11), so a development build falls
// between the releases around it; Has says so (Unknown) rather than
// guess.
//
// The package has no dependencies, so the harness, which must not import
// the mock, reads the same table.
package compat
