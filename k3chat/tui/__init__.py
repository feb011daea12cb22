"""The Textual view of k3chat: `run_tui()` is the entry point `k3chat.cli` calls.

Nothing here decides what a conversation does; `k3chat.conversation` owns that and this
package only renders its event stream and turns keys into calls (STYLE.md items 13-15).
"""
