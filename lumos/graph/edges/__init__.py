"""One builder per edge class; each reads a BuildContext and returns an EdgeList."""
