"""Markup spans carried from a text to its translation through word alignments.

A marked-up text (an HTML block, a Word paragraph) is translated as plain text; its markup is
a list of spans `(start, end, payload)` over the plain text: a `<b>` element, a Word run. This
module moves each span onto the translation the way Bergamot's HTML mode does
(browsermt/bergamot-translator, `src/translator/html.cpp`): each target word takes the spans of the source word aligned to it, so a link on
"casa" lands on "house" wherever the translation put it. No string matching: the words of the
translation need not resemble the source's.

Words are the whitespace-separated words of `str.split()`, counted from 0 in both texts, the
indices of the engines' `word_alignments`.
"""

# Characters outside every target word (the spaces between them) belong to no span, so a span's
# range runs from the first character of its first word to the last character of its last word.


def word_offsets(text):
    """`[(start, end)]`: the character range of each word of `text.split()`, in order."""
    offsets, start = [], None
    for index, character in enumerate(text):
        if character.isspace():
            if start is not None:
                offsets.append((start, index))
                start = None
        elif start is None:
            start = index
    if start is not None:
        offsets.append((start, len(text)))
    return offsets


def project_spans(source_text, spans, translation, *, parents=None, contiguous=True):
    """Ranges over a translation for the spans of its source text.

    Each target word takes the spans of the source word it is aligned to (a target word
    aligned to several source words takes those of the one inside the most spans); a target
    word aligned to nothing takes the spans its aligned neighbours on both sides share (at the
    text's edges, those of its one aligned neighbour). A source word belongs to the innermost
    spans that overlap it (a span over part of a word takes the whole word).

    When `translation.word_alignments` is `None` (the engine cannot align) or empty while
    both texts have words, target word `j` of `m` is taken as aligned to source word
    `floor((j + 0.5) * n / m)` of `n`: the relative word position. Every span gets a range
    either way: a tag is never dropped.

    Args:
        source_text: str. The text that was translated.
        spans: list of `(start, end, payload)`. Character ranges over `source_text`, nested
            or disjoint (never crossing), in document order (an enclosing span before the
            spans it encloses); `start == end` for a span without text (`<br>`, an image).
        translation: the engine's result for `source_text`: `.text` and `.word_alignments`
            (`(source_word, target_word)` pairs, or `None`).
        parents: list of int or None. The index in `spans` of each span's enclosing span
            (`None` for a top-level one). Defaults to `None`: inferred from the ranges, a span
            without text at the boundary of another counted outside it.
        contiguous: bool. `True`: exactly one range per span, nested as the spans were
            (siblings disjoint, children inside their parent; siblings may change order, as
            the words did): for markup whose elements must each appear once (HTML). A span
            takes the range from its first to its last target word unless that range would
            hold a sibling's word; then the longest run of consecutive words of its own.
            `False`: one range per run of consecutive target words of the span, so a span
            may come back in several pieces: for formatting that may repeat (Word runs).
            Defaults to `True`.

    Returns:
        With `contiguous=True`, a list of `(start, end, payload)` over `translation.text`,
        one per span in the order of `spans`. With `contiguous=False`, a list of
        `(start, end, payload)` sorted by position, at least one per span. A span whose
        source words got no target word is an empty range (`start == end`) placed after the
        translation of the source word before it.

    Example:
    ```python
    from types import SimpleNamespace
    from keras_transformer.documents.spans import project_spans

    # "la casa roja" -> "the red house": "casa" (word 1) became "house" (word 2).
    result = SimpleNamespace(text="the red house", word_alignments=[(0, 0), (1, 2), (2, 1)])
    print(project_spans("la casa roja", [(3, 7, "a")], result))  # [(8, 13, 'a')]
    ```
    """
    spans = [tuple(span) for span in spans]
    previous_start = 0
    for span in spans:
        if len(span) != 3 or not previous_start <= span[0] <= span[1] <= len(source_text):
            raise ValueError(
                "Each span must be (start, end, payload) with 0 <= start <= end <= "
                f"len(source_text) = {len(source_text)}, in document order (starts never "
                f"decreasing). Received: span={span!r}"
            )
        previous_start = span[0]
    if parents is None:
        parents = _infer_parents(spans)
    elif len(parents) != len(spans):
        raise ValueError(
            f"`parents` must have one entry per span ({len(spans)}). Received: "
            f"len(parents)={len(parents)}"
        )
    children = [[] for _ in spans] + [[]]  # the last list: top-level spans
    for index, parent in enumerate(parents):
        if parent is not None and not (
            0 <= parent < index
            and spans[parent][0] <= spans[index][0] <= spans[index][1] <= spans[parent][1]
        ):
            raise ValueError(
                "A span's parent must come before it in `spans` and enclose it. Received: "
                f"span {index} {spans[index][:2]} with parents[{index}]={parent}"
            )
        children[-1 if parent is None else parent].append(index)

    target_text = translation.text
    source_words, target_words = word_offsets(source_text), word_offsets(target_text)
    pairs = _alignment(translation.word_alignments, len(source_words), len(target_words))
    source_stacks = _source_stacks(spans, children, source_words)
    target_stacks = _target_stacks(pairs, source_stacks, len(target_words))
    targets_of = [[] for _ in source_words]
    for source, target in pairs:
        targets_of[source].append(target)
    placer = _Placer(spans, parents, children, source_words, target_words, targets_of)
    placer.members = [set(stack) for stack in target_stacks]
    if contiguous:
        placer.place(children[-1], 0, len(target_words), 0)
        return [(start, end, span[2]) for (start, end), span in zip(placer.ranges, spans)]
    return placer.place_pieces()


def _infer_parents(spans):
    """The enclosing span of each span, from the ranges: a span without text at another's
    end is counted after it, at its start inside it."""
    parents, stack = [], []
    for start, end, _ in spans:
        while stack:
            top_start, top_end, _ = spans[stack[-1]]
            if top_start <= start and end <= top_end and not start == end == top_end:
                break
            if start < top_end < end:
                raise ValueError(
                    "Spans must be nested or disjoint, never crossing. Received: spans "
                    f"{(top_start, top_end)} and {(start, end)}"
                )
            stack.pop()
        parents.append(stack[-1] if stack else None)
        if end > start:
            stack.append(len(parents) - 1)
    return parents


def _alignment(word_alignments, num_source, num_target):
    """Validated `(source, target)` pairs, or the relative-position fallback."""
    if word_alignments is not None:
        pairs = []
        for pair in word_alignments:
            source, target = pair
            if not (0 <= source < num_source and 0 <= target < num_target):
                raise ValueError(
                    f"A word alignment names a word the texts do not have ({num_source} source "
                    f"words, {num_target} target words). Received: pair={tuple(pair)!r}"
                )
            pairs.append((int(source), int(target)))
        if pairs or not (num_source and num_target):
            return pairs
    if not num_source:
        return []
    return [
        (min(num_source - 1, (2 * j + 1) * num_source // (2 * num_target)), j)
        for j in range(num_target)
    ]


def _source_stacks(spans, children, source_words):
    """For each source word, the spans it belongs to, outermost first: from the top level,
    repeatedly the child span overlapping the word the most (the first on a tie)."""
    stacks = []
    for word_start, word_end in source_words:
        stack, level = [], children[-1]
        while True:
            best, best_overlap = None, 0
            for index in level:
                overlap = min(word_end, spans[index][1]) - max(word_start, spans[index][0])
                if overlap > best_overlap:
                    best, best_overlap = index, overlap
            if best is None:
                break
            stack.append(best)
            level = children[best]
        stacks.append(tuple(stack))
    return stacks


def _target_stacks(pairs, source_stacks, num_target):
    sources_of = [[] for _ in range(num_target)]
    for source, target in pairs:
        sources_of[target].append(source)
    stacks = [
        max((source_stacks[s] for s in sorted(sources)), key=len) if sources else None
        for sources in sources_of
    ]
    aligned = [j for j, stack in enumerate(stacks) if stack is not None]
    if not aligned:
        return [()] * num_target
    filled, previous = [], None
    following = iter(aligned)
    next_aligned = next(following)
    for j, stack in enumerate(stacks):
        if stack is not None:
            previous, next_aligned = j, next(following, None)
            filled.append(stack)
            continue
        if previous is None:
            filled.append(stacks[next_aligned])
        elif next_aligned is None:
            filled.append(stacks[previous])
        else:
            common = []
            for left, right in zip(stacks[previous], stacks[next_aligned]):
                if left != right:
                    break
                common.append(left)
            filled.append(tuple(common))
    return filled


class _Placer:
    """Chooses each span's target words, top-down, and turns word indices into characters."""

    def __init__(self, spans, parents, children, source_words, target_words, targets_of):
        self.spans, self.parents, self.children = spans, parents, children
        self.source_words, self.target_words = source_words, target_words
        self.targets_of = targets_of  # target words of each source word
        self.members = None  # the spans of each target word (sets), set by the caller
        self.ranges = [None] * len(spans)

    def _char_of_gap(self, gap, low, high, char_low):
        """The character position of the gap before target word `gap` in words `[low,
        high)`: after the previous word, or before the first one."""
        if gap > low:
            return self.target_words[gap - 1][1]
        return self.target_words[low][0] if low < high else char_low

    def _gap(self, index, low, high, taken):
        """Where a span without target words goes: after the translation of the nearest
        source word before it, else before that of the nearest after it, else at `low`; then
        past any sibling's words it would fall inside."""
        start, end, _ = self.spans[index]
        gap = None
        before = [w for w, (_, word_end) in enumerate(self.source_words) if word_end <= start]
        for word in reversed(before):
            inside = [t for t in self.targets_of[word] if low <= t < high]
            if inside:
                gap = max(inside) + 1
                break
        if gap is None:
            after = [w for w, (word_start, _) in enumerate(self.source_words) if word_start >= end]
            for word in after:
                inside = [t for t in self.targets_of[word] if low <= t < high]
                if inside:
                    gap = min(inside)
                    break
        if gap is None:
            gap = low
        moved = True
        while moved:
            moved = False
            for first, last in taken:
                if first < gap <= last:
                    gap, moved = last + 1, True
        return gap

    def place(self, indices, low, high, char_low):
        """One range per span of `indices` (siblings) inside target words `[low, high)`."""
        words = {
            index: [j for j in range(low, high) if index in self.members[j]] for index in indices
        }
        owner = {j: index for index in indices for j in words[index]}
        taken = {}
        for index in indices:
            mine = words[index]
            if not mine:
                continue
            first, last = mine[0], mine[-1]
            if any(owner.get(j, index) != index for j in range(first, last + 1)):
                first, last = _longest_run(mine)
            taken[index] = (first, last)
        for index in indices:
            if index in taken:
                first, last = taken[index]
                start, end = self.target_words[first][0], self.target_words[last][1]
                self.ranges[index] = (start, end)
                self.place(self.children[index], first, last + 1, start)
            else:
                gap = self._gap(index, low, high, taken.values())
                char = self._char_of_gap(gap, low, high, char_low)
                self.ranges[index] = (char, char)
                self.place(self.children[index], gap, gap, char)

    def place_pieces(self):
        """Every run of consecutive target words of each span; an empty range for a span
        without words (inside its parent's first piece, past its siblings' pieces)."""
        pieces, runs_of = [], {}
        for index in range(len(self.spans)):
            mine = [j for j, members in enumerate(self.members) if index in members]
            runs_of[index] = _runs(mine)
        for index in range(len(self.spans)):
            for first, last in runs_of[index]:
                start, end = self.target_words[first][0], self.target_words[last][1]
                pieces.append((start, end, index))
            if runs_of[index]:
                continue
            parent = self.parents[index]
            siblings = self.children[-1 if parent is None else parent]
            taken = [run for s in siblings if s != index for run in runs_of[s]]
            low, high = 0, len(self.target_words)
            if parent is not None and runs_of[parent]:
                low, high = runs_of[parent][0][0], runs_of[parent][0][1] + 1
            gap = self._gap(index, low, high, taken)
            char = self._char_of_gap(gap, 0, len(self.target_words), 0)
            pieces.append((char, char, index))
        pieces.sort(key=lambda piece: (piece[0], piece[1], piece[2]))
        return [(start, end, self.spans[index][2]) for start, end, index in pieces]


def _runs(indices):
    """Maximal runs of consecutive integers of a sorted list, as `(first, last)`."""
    runs = []
    for j in indices:
        if runs and runs[-1][1] == j - 1:
            runs[-1] = (runs[-1][0], j)
        else:
            runs.append((j, j))
    return runs


def _longest_run(indices):
    return max(_runs(indices), key=lambda run: run[1] - run[0])
