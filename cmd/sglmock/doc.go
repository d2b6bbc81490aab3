// Command sglmock is an SGLang-compatible simulated inference server and a
// benchmark harness that tells whether an LLM-serving benchmark tells the
// truth. The command is thin: it parses flags and hands them to the packages.
//
// Run "sglmock help" for the commands.
package main
