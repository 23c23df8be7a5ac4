"""The main screen: conversation, live stats, legend, message box, footer.

The engine runs in Textual thread workers; one lock keeps it to one job at a
time (loading, a reply, switching drafter). Workers post small messages
(``tui.messages``) and the widgets are updated from those on the UI thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Header

from edgespec import DoneEvent, RoundEvent, StopReason, TokenEvent

from ..messages import EngineFailed, EngineLoaded, PlainCallMeasured, ReplyEnded, ReplyEvent
from ..metrics import PlainCallMeter, ReplyMetrics
from ..overflow import ContextTrimmed
from ..prompt import ChatMessage
from ..runner import EngineRunner
from ..session import EngineFactory, EngineInfo, GenerationSettings
from ..store import Conversation, ConversationStore, StoredMessage
from ..widgets.assistant_message import AssistantMessage
from ..widgets.chat_log import ChatLog
from ..widgets.legend import Legend
from ..widgets.prompt_input import PromptInput
from ..widgets.stats_panel import StatsPanel
from .conversations import ConversationsScreen
from .recovery import WorkerRecovery
from .settings_actions import AUTO, SettingsActions

STOP_WORDS = {
    StopReason.EOG.value: "done",
    StopReason.MAX_TOKENS.value: "max tokens",
    StopReason.STOP_STRING.value: "stop string",
    StopReason.CONTEXT_FULL.value: "context full",
}


@dataclass
class ChatConfig:
    """Everything the chat screen needs from outside: how to get an engine, where to save."""

    engine_factory: EngineFactory
    store: ConversationStore
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    linger_s: float = 1.5  # how long a rejected draft token stays visible
    show_rejected: bool = False
    rpc: tuple[str, ...] = ()  # the target's RPC workers: watched for a loss
    resume: Conversation | None = None  # shown at start; a reply it lacks is generated


class ChatScreen(SettingsActions, WorkerRecovery, Screen):
    """Chat with the target model while watching the drafter's proposals being judged."""

    BINDINGS = [
        # Enter is handled by the message box itself, in order with the typed keys (a
        # priority binding would run before the box has seen them); this one is for the
        # footer, and for Enter while something else has focus.
        Binding("enter", "send", "Send"),
        # priority: these work while the message box has focus
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+n", "new_chat", "New", priority=True),
        Binding("ctrl+o", "open", "Open", priority=True),
        Binding("f2", "gamma(-1)", "γ-", priority=True),
        Binding("f3", "gamma(1)", "γ+", priority=True),
        Binding("f4", "temperature", "Temp", priority=True),
        Binding("f5", "drafter", "Draft", priority=True),
        Binding("f6", "toggle_rejected", "Rejected", priority=True),
        Binding("ctrl+r", "retry", "Retry", priority=True, show=False),
    ]

    def __init__(self, config: ChatConfig) -> None:
        super().__init__()
        self.config = config
        self.settings = config.settings
        self.show_rejected = config.show_rejected
        self.rpc = config.rpc
        self.runner = EngineRunner(
            config.engine_factory, self.post_message, watch_rpc=bool(config.rpc)
        )
        self._stop_probing = threading.Event()
        self.engine_info: EngineInfo | None = None
        self.engine_error: str | None = None
        self.conversation = Conversation()
        self.meter = PlainCallMeter()
        self.generating = False
        self._reply_id = 0
        self._stop = threading.Event()
        self._reply: AssistantMessage | None = None
        self._metrics: ReplyMetrics | None = None
        self._reply_auto = False  # the streaming reply lets auto choose gamma
        # the draft length auto used in its last reply (mean per round, rounded): where
        # F2/F3 step from when leaving auto; 0 before any
        self.auto_gamma = 0
        # how many of the oldest messages the last reply's prompt left out (tui.overflow)
        self.trimmed = 0

    def compose(self) -> ComposeResult:
        """Header, conversation and stats side by side, legend, message box, footer."""
        yield Header(icon="◆")
        with Horizontal(id="main"):
            yield ChatLog(id="chat")
            yield StatsPanel(id="stats")
        yield Legend(id="legend")
        yield PromptInput(id="prompt", placeholder="Loading models…")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        """Start loading the models off the UI thread."""
        self.title = "edgespec chat"
        self.sub_title = "loading models…"
        self.query_one(StatsPanel).show(settings=self.settings, meter=self.meter)
        self.query_one(PromptInput).focus()
        if self.config.resume is not None:
            self.load_conversation(self.config.resume)
        self._load_engine()

    def on_unmount(self) -> None:
        """Quitting mid-reply: stop the engine (the process would otherwise wait for it)."""
        self._stop.set()
        self._stop_probing.set()

    # --- engine workers (threads; the runner serialises them) -----------------

    @work(thread=True, group="engine", exit_on_error=False)
    def _load_engine(self) -> None:
        self.runner.run_job(self.runner.load)

    @work(thread=True, group="engine", exit_on_error=False)
    def _switch_drafter(self, choice: str) -> None:
        self.runner.run_job(self.runner.switch_drafter, choice)

    @work(thread=True, group="reply", exit_on_error=False)
    def _generate(
        self,
        reply_id: int,
        messages: list[ChatMessage],
        settings: GenerationSettings,
        stop: threading.Event,
    ) -> None:
        self.runner.run_job(self.runner.reply, reply_id, messages, settings, stop)

    # --- messages from workers ----------------------------------------------------

    def on_engine_loaded(self, msg: EngineLoaded) -> None:
        """Show the loaded pair; say so when it is a base model (completion mode)."""
        first = self.engine_info is None
        self.engine_info, self.engine_error = msg.info, None
        info = msg.info
        mode = "chat" if info.chat_mode else "COMPLETION MODE"
        self.sub_title = f"{info.target} · draft: {info.draft or 'none'} · {mode}"
        chat_log = self.query_one(ChatLog)
        if info.chat_mode:
            chat_log.set_banner(
                f"Chat with {info.target} (its own chat template).", completion=False
            )
        else:
            chat_log.set_banner(
                f"Completion mode: {info.target} has no chat template; it continues your text.",
                completion=True,
            )
        prompt = self.query_one(PromptInput)
        prompt.placeholder = (
            "Message (Enter sends, Shift+Enter/Ctrl+J new line)"
            if info.chat_mode
            else "Text to continue (Enter sends)"
        )
        panel = self.query_one(StatsPanel)
        panel.show(info=info, status="ready")
        if first and info.calibration:  # gamma auto measuring its cost curve as it goes
            panel.show(note=f"gamma auto: {info.calibration}")
        if not first:  # in the panel, in place of the previous change: no pile of toasts
            panel.show(note=f"drafter = {info.draft or 'none'}")
        elif info.draft is None and len(info.drafter_choices) > 1:
            self.notify("No draft model: the target decodes alone. F5 switches drafter.")
        if first and self.pending_reply() and not self.generating:  # a resumed conversation
            self._start_reply()

    def on_plain_call_measured(self, msg: PlainCallMeasured) -> None:
        """A measured plain target call: the speed-up estimate uses it from now on."""
        self.meter.add(msg.seconds)
        self.query_one(StatsPanel).refresh(layout=True)

    def on_engine_failed(self, msg: EngineFailed) -> None:
        """Loading failed: keep the app open and say why."""
        if self.runner.engine is None:
            self.engine_error = msg.error
            self.sub_title = "no model loaded"
            self.query_one(StatsPanel).show(status="no model")
            self.query_one(
                PromptInput
            ).placeholder = "No model loaded (see the error). Ctrl+Q quits."
        self.notify(msg.error, title="Model error", severity="error", timeout=10)

    def on_reply_event(self, msg: ReplyEvent) -> None:
        """Feed one engine event to the reply and the stats panel."""
        if msg.reply_id != self._reply_id or self._reply is None or self._metrics is None:
            return  # a reply the person already left (new chat, reopened conversation)
        ev = msg.event
        if isinstance(ev, TokenEvent):
            self._reply.add_token(ev)
            self.query_one(ChatLog).follow()
        elif isinstance(ev, RoundEvent):
            self._metrics.on_round(ev, self.meter)
            st = ev.stats
            if self._reply_auto and st.rounds:
                self.auto_gamma = int(st.drafted / st.rounds + 0.5)
            self.query_one(StatsPanel).show(
                metrics=self._metrics, auto_gamma=self.auto_gamma if self._reply_auto else None
            )
        elif isinstance(ev, ContextTrimmed):
            # a note when more of the conversation is left out than before
            if ev.messages > self.trimmed:
                self.query_one(ChatLog).add_note(ev.note(), before=self._reply)
            self.trimmed = ev.messages
        elif isinstance(ev, DoneEvent):
            self._metrics.on_done(ev)
            self._reply.finish(ev)
            if ev.stop_reason is StopReason.CONTEXT_FULL:
                self.notify(
                    "The context is full: the reply was cut. Ctrl+N starts a new chat.",
                    severity="warning",
                )

    def on_reply_ended(self, msg: ReplyEnded) -> None:
        """Save the reply (also a stopped one); on an error, give the message back."""
        if msg.reply_id != self._reply_id:
            return
        self.generating = False
        reply, metrics = self._reply, self._metrics
        self._reply = None
        panel = self.query_one(StatsPanel)
        if reply is None:
            return
        if msg.error is not None and not reply.text:
            self._undo_turn(reply)
            panel.show(status="error")
            self.notify(msg.error, title="Generation failed", severity="error", timeout=10)
            return
        if msg.error is not None:
            self.notify(msg.error, title="Generation failed", severity="error", timeout=10)
        status = "stopped" if msg.stopped else ("error" if msg.error else "")
        reply.finish(status=status)
        reason = metrics.stop_reason if metrics else None
        panel.show(status=status or STOP_WORDS.get(reason or "", "done"))
        self.conversation.messages.append(
            StoredMessage(
                role="assistant",
                content=reply.text,
                segments=[(p.kind.value, p.text) for p in reply.pieces if p.text],
                stopped=msg.stopped,
                stats=metrics.stats.to_dict() if metrics else None,
            )
        )
        self._save()

    def _undo_turn(self, reply: AssistantMessage) -> None:
        # Nothing was generated: drop the turn and put the text back in the box.
        chat_log = self.query_one(ChatLog)
        if self.conversation.messages and self.conversation.messages[-1].role == "user":
            text = self.conversation.messages.pop().content
            prompt = self.query_one(PromptInput)
            if not prompt.text:
                prompt.text = text
        reply.remove()
        users = list(chat_log.query("UserMessage"))
        if users:
            users[-1].remove()
        self._save()

    # --- actions ------------------------------------------------------------------

    def on_prompt_input_submitted(self, msg: PromptInput.Submitted) -> None:
        """Enter in the message box."""
        if self.send(msg.text):
            msg.input.clear()

    def action_send(self) -> None:
        """Send what is in the message box."""
        self.query_one(PromptInput).action_submit()

    def send(self, text: str) -> bool:
        """Start a reply to text; False (with a notification) when that cannot happen now."""
        if self.runner.engine is None or self.engine_info is None:
            why = self.engine_error or "the models are still loading"
            self.notify(f"Cannot send: {why}", severity="warning")
            return False
        if self.runner.lost is not None:
            self.notify("Cannot send: an RPC worker was lost (Ctrl+R once it is back).")
            return False
        if self.generating:
            self.notify("A reply is still streaming: Esc stops it.", severity="warning")
            return False
        self.conversation.messages.append(StoredMessage(role="user", content=text))
        self.query_one(ChatLog).add_user(text)
        self._start_reply()
        return True

    def _start_reply(self) -> None:
        # Generate the reply to the conversation's last message, the person's.
        assert self.engine_info is not None
        info = self.engine_info
        self.conversation.target = info.target
        self.conversation.draft = info.draft
        self.conversation.mode = "chat" if info.chat_mode else "completion"
        self._save()
        chat_log = self.query_one(ChatLog)
        self._reply = chat_log.add_assistant(
            linger_s=self.config.linger_s, show_rejected=self.show_rejected
        )
        gamma = self.settings.gamma if info.draft else 0
        self._reply_auto = gamma == AUTO
        self._metrics = ReplyMetrics(gamma=gamma if isinstance(gamma, int) else 0)
        self.query_one(StatsPanel).show(metrics=self._metrics, status="generating…")
        self._reply_id += 1
        self._stop = threading.Event()
        self.generating = True
        messages = [ChatMessage(m.role, m.content) for m in self.conversation.messages]
        self._generate(self._reply_id, messages, self.settings, self._stop)

    def action_stop(self) -> None:
        """Stop the streaming reply (the app keeps running)."""
        if self.generating:
            self._stop.set()
            self.query_one(StatsPanel).show(status="stopping…")

    def _abandon_reply(self) -> None:
        # Leave the current reply behind: its worker stops, its late events are ignored.
        if self.generating:
            self._stop.set()
            self._reply_id += 1
            self.generating = False
        self._reply, self._metrics = None, None

    def action_new_chat(self) -> None:
        """Start an empty conversation (the old one stays saved)."""
        self._abandon_reply()
        self.conversation = Conversation()
        self.trimmed = 0
        self.query_one(ChatLog).clear_messages()
        self.query_one(StatsPanel).show(
            clear_metrics=True, status="ready" if self.runner.engine else None
        )
        self.query_one(PromptInput).focus()
        self.notify("New chat")

    def action_open(self) -> None:
        """Choose a saved conversation to reopen (files that are not conversations are skipped)."""
        conversations, skipped = self.config.store.scan()
        self.app.push_screen(ConversationsScreen(conversations), self._reopen)
        if skipped:
            files = "file" if skipped == 1 else "files"
            self.notify(
                f"{skipped} unreadable conversation {files} skipped in {self.config.store.dir}",
                severity="warning",
            )

    def _reopen(self, conv_id: str | None) -> None:
        if conv_id is None:
            return
        try:
            conv = self.config.store.load(conv_id)
        except (OSError, ValueError) as e:
            self.notify(f"Cannot open conversation: {e}", severity="error")
            return
        self.load_conversation(conv)

    def load_conversation(self, conv: Conversation) -> None:
        """Show a saved conversation; the next message continues it."""
        self._abandon_reply()
        self.conversation = conv
        self.trimmed = 0
        chat_log = self.query_one(ChatLog)
        chat_log.show_messages(
            conv.messages, linger_s=self.config.linger_s, show_rejected=self.show_rejected
        )
        self.query_one(StatsPanel).show(clear_metrics=True)
        self.query_one(PromptInput).focus()
        self.call_after_refresh(chat_log.scroll_end, animate=False)
        self.notify(f"Opened: {conv.title or conv.default_title()}")

    def _save(self) -> None:
        if not self.conversation.messages:
            return
        try:
            self.config.store.save(self.conversation)
        except (OSError, ValueError) as e:
            self.notify(f"Could not save the conversation: {e}", severity="error")
