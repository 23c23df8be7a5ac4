"""The Textual app and its factory (tests build the app the same way, with a fake engine)."""

from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.binding import Binding

from .screens.chat import ChatConfig, ChatScreen
from .session import EngineFactory, GenerationSettings
from .store import Conversation, ConversationStore


class EdgespecApp(App[int]):
    """edgespec chat: a conversation with the target, speculation shown token by token."""

    CSS_PATH = "edgespec.tcss"
    TITLE = "edgespec chat"
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", priority=True)]

    def __init__(self, config: ChatConfig) -> None:
        super().__init__()
        self.config = config
        self.worker_lost = False  # an RPC worker was lost: a thread is parked for good
        # Ctrl+R after the workers came back: start again resuming this conversation
        # id ("" for none saved); tui.command does it once the terminal is restored
        self.restart_with: str | None = None
        self.restart_history: str | None = None  # ... and the lookup history saved here

    def on_mount(self) -> None:
        """Open the chat screen."""
        self.push_screen(ChatScreen(self.config))

    @property
    def chat(self) -> ChatScreen:
        """The main screen (wherever modal screens are stacked)."""
        return next(s for s in self.screen_stack if isinstance(s, ChatScreen))


def make_app(
    engine_factory: EngineFactory,
    *,
    settings: GenerationSettings | None = None,
    data_dir: Path | None = None,
    store: ConversationStore | None = None,
    linger_s: float = 1.5,
    show_rejected: bool = False,
    rpc: tuple[str, ...] = (),
    resume: Conversation | None = None,
) -> EdgespecApp:
    """Build the chat app.

    Args:
        engine_factory: called once in a worker thread; returns a ChatEngine (the
            real LlamaChatEngine, or a scripted fake in tests). May raise
            edgespec errors, which the app shows as notifications.
        settings: initial gamma, temperature, ... (changeable in the app).
        data_dir: where conversations are saved (default: $EDGESPEC_DATA_DIR or
            the platformdirs user data directory).
        store: a ready ConversationStore (overrides data_dir).
        linger_s: seconds a rejected draft token stays visible before it fades.
        show_rejected: keep rejected draft tokens visible from the start.
        rpc: the RPC workers the target is on: a lost one is waited for, then Ctrl+R
            offers to start again (``restart_with``).
        resume: a saved conversation to show at start; when it ends with the person's
            message, its reply is generated once the models are loaded.
    """
    config = ChatConfig(
        engine_factory=engine_factory,
        store=store or ConversationStore(data_dir),
        settings=settings or GenerationSettings(),
        linger_s=linger_s,
        show_rejected=show_rejected,
        rpc=rpc,
        resume=resume,
    )
    return EdgespecApp(config)
