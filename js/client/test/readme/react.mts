// js/client/README.md, the AI SDK's chat (see follow.mts). Never run: it is
// a component's body, at the top of a module to keep the imports beside it.

// snippet:use-chat
// before: the AI SDK's useChat with @workflow/ai's transport
// import { useChat } from '@ai-sdk/react';
// import { WorkflowChatTransport } from '@workflow/ai';
// const { messages, status, sendMessage, stop } = useChat({ transport: new WorkflowChatTransport({ api: '/api/chat' }) });

// after: the same page on weir, rewinds applied: one import changed
import { useChat, WorkflowChatTransport } from '@weirhq/client/react';
const { messages, status, sendMessage, stop } = useChat({ transport: new WorkflowChatTransport({ api: '/api/chat' }) });
// (or, without the transport: useChat({ api: '/api/chat' }))
// end snippet
