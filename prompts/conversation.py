"""The follow-up question rewrite: a question asked on a thread with earlier turns ("When was
she born?") becomes a standalone question before any retrieval, since every method searches
with the question's words and no method's paper has a conversation.

The text is LangChain's ``CONDENSE_QUESTION_PROMPT`` (langchain-ai/langchain,
libs/langchain/langchain/chains/conversational_retrieval/prompts.py, commit 44195518c664), the
prompt of its ConversationalRetrievalChain, the usual choice for this one job; the history is
laid out as that chain lays it out (``_get_chat_history``: ``Human: ...`` / ``Assistant: ...``
lines).
"""

from __future__ import annotations

from noterag.core.prompt import Prompt

CONDENSE_SOURCE = (
    "LangChain CONDENSE_QUESTION_PROMPT (langchain-ai/langchain, libs/langchain/langchain/chains/"
    "conversational_retrieval/prompts.py @ 44195518c664)"
)

CONDENSE = Prompt(
    "condense_question",
    "Given the following conversation and a follow up question, rephrase the follow up "
    "question to be a standalone question, in its original language.\n\n"
    "Chat History:\n{chat_history}\nFollow Up Input: {question}\nStandalone question:",
    CONDENSE_SOURCE,
)

# how each speaker's turn starts in {chat_history} (LangChain's _ROLE_MAP)
ROLE_PREFIX = {"human": "Human: ", "ai": "Assistant: "}
