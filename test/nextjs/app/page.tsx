export default function Page() {
  return <p>A Vercel Workflow app on weir: POST /api/story starts a run.</p>;
}
